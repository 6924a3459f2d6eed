"""FairScale's precision plugins: clipping by the global norm of the OSS shards, and a scaler that agrees across ranks.

After ShardedDataParallel's backward each rank holds only the gradients of the parameters it owns, so
``torch.nn.utils.clip_grad_norm_`` would compute a different, partial norm on every rank. ``OSS.clip_grad_norm``
all-reduces the shard norms into the global norm. ``16-mixed`` gets FairScale's ``ShardedGradScaler`` on CUDA and
:class:`~lightning_mgpu.plugins.precision.shard_aware.ShardAwareGradScaler` elsewhere (FairScale's disables itself
without CUDA). Clipping by value is elementwise and needs nothing special.

The classes are defined at module level so that a strategy holding them can be pickled for ``sharded_spawn``.
"""

from __future__ import annotations

import torch
from lightning.pytorch.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.plugins.precision.shard_aware import ShardAwareGradScaler, engine_precision
from lightning_mgpu.utilities.optimizers import unwrap_optimizer

__all__ = [
    "ShardedDoublePrecision",
    "ShardedHalfPrecision",
    "ShardedMixedPrecision",
    "ShardedPrecision",
    "fairscale_precision",
]


class _OSSGradClipping(Precision):
    """Mixin: clip by norm with ``OSS.clip_grad_norm`` once the optimizer is FairScale's OSS."""

    @override
    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: int | float) -> None:
        from fairscale.optim import OSS  # this plugin exists only under ShardedStrategy, which required FairScale

        inner = unwrap_optimizer(optimizer)
        if isinstance(inner, OSS):
            # A collective: every rank reaches this point in the same step (the automatic loop clips on all).
            inner.clip_grad_norm(clip_val)
            return
        super().clip_grad_by_norm(optimizer, clip_val)  # not sharded (yet): the whole gradients


class ShardedPrecision(_OSSGradClipping, Precision):
    """``32-true`` under ``strategy='sharded'``."""


class ShardedMixedPrecision(_OSSGradClipping, MixedPrecision):
    """``16-mixed`` (with a scaler that agrees across ranks) and ``bf16-mixed`` under ``strategy='sharded'``."""


class ShardedHalfPrecision(_OSSGradClipping, HalfPrecision):
    """``16-true`` and ``bf16-true`` under ``strategy='sharded'``."""


class ShardedDoublePrecision(_OSSGradClipping, DoublePrecision):
    """``64-true`` under ``strategy='sharded'``."""


_CLASSES: dict[type[Precision], type[Precision]] = {
    Precision: ShardedPrecision,
    MixedPrecision: ShardedMixedPrecision,
    HalfPrecision: ShardedHalfPrecision,
    DoublePrecision: ShardedDoublePrecision,
}


def _scaler(scaler: torch.amp.GradScaler, device: str) -> torch.amp.GradScaler:
    if device != "cuda":
        return ShardAwareGradScaler.like(scaler)  # FairScale's ShardedGradScaler disables itself without CUDA
    from fairscale.optim.grad_scaler import ShardedGradScaler  # this plugin exists only under ShardedStrategy

    # Each rank holds only its shard of the gradients, so the inf/NaN check is all-reduced, or one rank skips a step
    # that another takes.
    if not scaler.is_enabled():  # a disabled torch scaler (e.g. built without CUDA) has no settings to carry over
        new = ShardedGradScaler(enabled=False)
    else:
        new = ShardedGradScaler(
            init_scale=scaler.get_scale(),
            growth_factor=scaler.get_growth_factor(),
            backoff_factor=scaler.get_backoff_factor(),
            growth_interval=scaler.get_growth_interval(),
        )
    new.shard_aware = True  # our mark (is_shard_aware)
    return new


def fairscale_precision(plugin: Precision) -> Precision:
    """FairScale's plugin with the settings of Lightning's stock ``plugin``."""
    return engine_precision(plugin, _CLASSES, _scaler, owner="sharded")
