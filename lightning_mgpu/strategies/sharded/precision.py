"""Shard-aware precision for the ``sharded`` strategy: gradient clipping and loss scaling on sharded gradients.

After ShardedDataParallel's backward each rank holds only the gradients of the parameters it owns, so
``torch.nn.utils.clip_grad_norm_`` would compute a different, partial norm on every rank, and a plain
``GradScaler`` would find inf/NaN on one rank only and let the ranks disagree on skipping a step.
``OSS.clip_grad_norm`` all-reduces the shard norms into the global norm; the scalers here all-reduce the
inf/NaN flag. Clipping by value is elementwise and needs nothing special.

The strategy owns this for every backend (:meth:`ShardedStrategy.shards_gradients` says whether gradients
are sharded); the ``AutoMixedPrecision`` callback only checks the result.

The classes are defined at module level (not built on the fly) so that a strategy holding them can be
pickled for ``sharded_spawn``.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch.plugins.precision import (
    DoublePrecision,
    HalfPrecision,
    MixedPrecision,
    Precision,
)
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.strategies._optim import unwrap_optimizer


class _OSSGradClipping:
    """Mixin: clip by norm with ``OSS.clip_grad_norm`` when the optimizer is FairScale's OSS."""

    @override
    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: int | float) -> None:
        inner = unwrap_optimizer(optimizer)
        oss_module = sys.modules.get("fairscale.optim.oss")
        if oss_module is not None and isinstance(inner, oss_module.OSS):
            # A collective: every rank reaches this point in the same step (the automatic loop clips on all).
            inner.clip_grad_norm(clip_val)
            return
        grads = [p.grad for group in inner.param_groups for p in group["params"] if p.grad is not None]
        if any(hasattr(g, "full_tensor") for g in grads):
            # FSDP2: DTensor gradient shards. The norm of the shards is a partial DTensor; full_tensor() all-reduces
            # it into the global norm (a collective), as torchtitan does, and every rank scales by the same factor.
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
            norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
            torch.nn.utils.clip_grads_with_norm_([p for g in inner.param_groups for p in g["params"]], clip_val, norm)
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


class ShardAwareGradScaler(torch.amp.GradScaler):
    """A ``GradScaler`` whose inf/NaN check is all-reduced over the process group, on any device.

    With sharded gradients (ZeRO-2) each rank holds only its shard's gradients, so a plain scaler on one rank
    may skip a step that another rank takes. This is what FairScale's ``ShardedGradScaler`` does on CUDA;
    FairScale's version disables itself without CUDA. Exactly one collective per ``unscale_`` runs on every
    rank, even on a rank that owns no gradient.

    Args:
        device: the device of the gradients (``"cuda"`` or ``"cpu"``).
        process_group: the group the gradients are sharded over (default: the world).
        **kwargs: passed to ``torch.amp.GradScaler`` (``init_scale``, ``growth_factor``, ...).
    """

    shard_aware = True

    def __init__(self, device: str = "cuda", process_group: Any = None, **kwargs: Any) -> None:
        super().__init__(device, **kwargs)
        self.process_group = process_group

    @classmethod
    def like(cls, scaler: torch.amp.GradScaler, process_group: Any = None) -> ShardAwareGradScaler:
        """A shard-aware scaler with the same device, settings and current scale as ``scaler``."""
        return cls(
            getattr(scaler, "_device", "cuda"),
            process_group=process_group,
            init_scale=scaler.get_scale() if scaler.is_enabled() else 2.0**16,
            growth_factor=scaler.get_growth_factor(),
            backoff_factor=scaler.get_backoff_factor(),
            growth_interval=scaler.get_growth_interval(),
            enabled=scaler.is_enabled(),
        )

    @override
    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        super().unscale_(optimizer)
        if not self.is_enabled() or not (dist.is_available() and dist.is_initialized()):
            return
        per_device = self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        assert self._scale is not None
        found = torch.zeros(1, dtype=torch.float32, device=self._scale.device)
        for flag in per_device.values():
            found += flag.to(found.device)
        dist.all_reduce(found, op=dist.ReduceOp.MAX, group=self.process_group)
        for flag in per_device.values():
            flag.copy_(found.to(flag.device).reshape(flag.shape))
        if not per_device:  # a rank without gradients must still skip when the others do
            per_device[found.device] = found


def is_shard_aware(scaler: Any) -> bool:
    """Whether ``scaler`` agrees on inf/NaN across ranks (ours, or FairScale's ``ShardedGradScaler``)."""
    return bool(getattr(scaler, "shard_aware", False))


_SHARD_AWARE: dict[type[Precision], type[Precision]] = {
    Precision: ShardedPrecision,
    MixedPrecision: ShardedMixedPrecision,
    HalfPrecision: ShardedHalfPrecision,
    DoublePrecision: ShardedDoublePrecision,
}


def shard_aware_precision(plugin: Precision, shards_gradients: bool) -> Precision:
    """Make ``plugin`` shard-aware, in place, and return it.

    The class of a stock plugin becomes its shard-aware subclass (same state, same behaviour, plus the
    global-norm clipping under OSS). Where gradients are sharded (``shards_gradients``), ``16-mixed`` also gets
    a scaler that agrees on inf/NaN across ranks: FairScale's ``ShardedGradScaler`` on CUDA, else
    :class:`ShardAwareGradScaler`. Where they are not (torch's ZeRO-1 all-reduces full gradients), the
    scaler is left alone: an extra all-reduce per ``unscale_`` would buy nothing. The same object is kept
    because the Trainer also holds a reference to it.
    """
    if isinstance(plugin, _OSSGradClipping):
        return plugin
    target = _SHARD_AWARE.get(type(plugin))
    if target is None:
        if shards_gradients:
            from lightning.pytorch.utilities.rank_zero import rank_zero_warn

            rank_zero_warn(
                f"strategy='sharded' does not know the precision plugin {type(plugin).__qualname__}; gradient clipping"
                " by norm would use each rank's partial gradients instead of the global norm. Use one of Lightning's"
                " stock precision plugins (e.g. `precision='bf16-mixed'`), or clip by value."
            )
        return plugin
    scaler = getattr(plugin, "scaler", None)
    if shards_gradients and isinstance(plugin, MixedPrecision) and scaler is not None and not is_shard_aware(scaler):
        plugin.scaler = _shard_aware_scaler(scaler, plugin.device)
    plugin.__class__ = target
    return plugin


def _shard_aware_scaler(scaler: torch.amp.GradScaler, device: str) -> torch.amp.GradScaler:
    if device == "cuda" and "fairscale" in sys.modules:
        from lightning_mgpu.strategies.sharded.fairscale import sharded_grad_scaler

        new = sharded_grad_scaler(scaler)
        new.shard_aware = True  # type: ignore[attr-defined]
        return new
    return ShardAwareGradScaler.like(scaler)


__all__ = [
    "ShardedDoublePrecision",
    "ShardedHalfPrecision",
    "ShardedMixedPrecision",
    "ShardedPrecision",
    "ShardAwareGradScaler",
    "is_shard_aware",
    "shard_aware_precision",
]
