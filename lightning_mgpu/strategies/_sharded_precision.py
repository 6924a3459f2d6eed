"""Precision plugins that clip gradients correctly under FairScale's sharded gradients.

After ShardedDataParallel's backward each rank holds only the gradients of the parameters it owns,
so ``torch.nn.utils.clip_grad_norm_`` would compute a different, partial norm on every rank.
``OSS.clip_grad_norm`` all-reduces the shard norms into the global norm. Clipping by value is
elementwise and needs nothing special.

The classes are defined at module level (not built on the fly) so that a strategy holding them can be
pickled for ``sharded_spawn``.
"""

from __future__ import annotations

import sys
from typing import Union

from lightning.pytorch.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.strategies._sharded_optim import unwrap_optimizer


class _OSSGradClipping:
    """Mixin: clip by norm with ``OSS.clip_grad_norm`` when the optimizer is FairScale's OSS."""

    @override
    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: Union[int, float]) -> None:
        inner = unwrap_optimizer(optimizer)
        oss_module = sys.modules.get("fairscale.optim.oss")
        if oss_module is not None and isinstance(inner, oss_module.OSS):
            # A collective: every rank reaches this point in the same step (the automatic loop clips on all).
            inner.clip_grad_norm(clip_val)
            return
        super().clip_grad_by_norm(optimizer, clip_val)  # type: ignore[misc]


class ShardedPrecision(_OSSGradClipping, Precision):
    """``32-true`` under ``strategy='sharded'``."""


class ShardedMixedPrecision(_OSSGradClipping, MixedPrecision):
    """``16-mixed`` (with FairScale's ShardedGradScaler) and ``bf16-mixed`` under ``strategy='sharded'``."""


class ShardedHalfPrecision(_OSSGradClipping, HalfPrecision):
    """``16-true`` and ``bf16-true`` under ``strategy='sharded'``."""


class ShardedDoublePrecision(_OSSGradClipping, DoublePrecision):
    """``64-true`` under ``strategy='sharded'``."""


_SHARD_AWARE: dict[type[Precision], type[Precision]] = {
    Precision: ShardedPrecision,
    MixedPrecision: ShardedMixedPrecision,
    HalfPrecision: ShardedHalfPrecision,
    DoublePrecision: ShardedDoublePrecision,
}


def fairscale_precision(plugin: Precision) -> Precision:
    """Make ``plugin`` shard-aware for FairScale, in place, and return it.

    The class of a stock plugin becomes its shard-aware subclass (same state, same behaviour, plus the
    global-norm clipping); ``16-mixed`` gets FairScale's ``ShardedGradScaler``. The same object is kept
    because the Trainer also holds a reference to it.

    Raises:
        ValueError: ``16-mixed`` on a device other than CUDA (Lightning itself turns ``16-mixed`` on CPU
            into ``bf16-mixed``; a hand-built plugin can still ask for it).
    """
    if isinstance(plugin, _OSSGradClipping):
        return plugin
    target = _SHARD_AWARE.get(type(plugin))
    if target is None:
        from lightning.pytorch.utilities.rank_zero import rank_zero_warn

        rank_zero_warn(
            f"strategy='sharded' does not know the precision plugin {type(plugin).__qualname__}; gradient clipping"
            " by norm would use each rank's partial gradients instead of the global norm. Use one of Lightning's"
            " stock precision plugins (e.g. `precision='bf16-mixed'`), or clip by value."
        )
        return plugin
    if isinstance(plugin, MixedPrecision) and plugin.scaler is not None:
        from lightning_mgpu.strategies._sharded_fairscale import ShardedGradScaler, sharded_grad_scaler

        if plugin.device != "cuda":
            raise ValueError(
                f"precision='16-mixed' with strategy='sharded' needs CUDA (FairScale's ShardedGradScaler is CUDA-only);"
                f" the precision plugin targets {plugin.device!r}. Use precision='bf16-mixed' there."
            )
        if not isinstance(plugin.scaler, ShardedGradScaler):
            plugin.scaler = sharded_grad_scaler(plugin.scaler)
    plugin.__class__ = target
    return plugin


def scaler_is_sharded(plugin: Precision) -> bool:
    """Whether ``plugin`` scales the loss with FairScale's ShardedGradScaler."""
    scaler = getattr(plugin, "scaler", None)
    gs_module = sys.modules.get("fairscale.optim.grad_scaler")
    return scaler is not None and gs_module is not None and isinstance(scaler, gs_module.ShardedGradScaler)


__all__ = [
    "ShardedDoublePrecision",
    "ShardedHalfPrecision",
    "ShardedMixedPrecision",
    "ShardedPrecision",
    "fairscale_precision",
    "scaler_is_sharded",
]
