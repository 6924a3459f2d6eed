"""FSDP2's precision plugins: clipping by the global norm of the DTensor gradient shards, and a scaler that agrees.

After FSDP2's reduce-scatter each rank holds DTensor shards of the gradients. Their norm is a partial DTensor;
``full_tensor()`` all-reduces it into the global norm (a collective), as torchtitan does, and every rank scales by
the same factor. ``16-mixed`` gets :class:`~lightning_mgpu.plugins.precision.shard_aware.ShardAwareGradScaler`, whose
inf/NaN check is all-reduced. For low-precision compute prefer ``FSDP2Strategy(mp_policy=...)``.

The classes are defined at module level so that a strategy holding them can be pickled for ``sharded_fsdp2_spawn``.
"""

from __future__ import annotations

import torch
from lightning.pytorch.plugins.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.plugins.precision.shard_aware import ShardAwareGradScaler, engine_precision
from lightning_mgpu.utilities.optimizers import unwrap_optimizer

__all__ = ["FSDP2DoublePrecision", "FSDP2HalfPrecision", "FSDP2MixedPrecision", "FSDP2Precision", "fsdp2_precision"]


class _DTensorGradClipping(Precision):
    """Mixin: clip by the global norm of DTensor gradient shards."""

    @override
    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: int | float) -> None:
        inner = unwrap_optimizer(optimizer)
        params = [p for group in inner.param_groups for p in group["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        if not any(hasattr(g, "full_tensor") for g in grads):
            super().clip_grad_by_norm(optimizer, clip_val)  # not sharded: the whole gradients
            return
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # a collective: the global norm
        torch.nn.utils.clip_grads_with_norm_(params, clip_val, norm)


class FSDP2Precision(_DTensorGradClipping, Precision):
    """``32-true`` under ``FSDP2Strategy``."""


class FSDP2MixedPrecision(_DTensorGradClipping, MixedPrecision):
    """``16-mixed`` (with a scaler that agrees across ranks) and ``bf16-mixed`` under ``FSDP2Strategy``."""


class FSDP2HalfPrecision(_DTensorGradClipping, HalfPrecision):
    """``16-true`` and ``bf16-true`` under ``FSDP2Strategy``."""


class FSDP2DoublePrecision(_DTensorGradClipping, DoublePrecision):
    """``64-true`` under ``FSDP2Strategy``."""


_CLASSES: dict[type[Precision], type[Precision]] = {
    Precision: FSDP2Precision,
    MixedPrecision: FSDP2MixedPrecision,
    HalfPrecision: FSDP2HalfPrecision,
    DoublePrecision: FSDP2DoublePrecision,
}


def _scaler(scaler: torch.amp.GradScaler, device: str) -> torch.amp.GradScaler:
    return ShardAwareGradScaler.like(scaler)


def fsdp2_precision(plugin: Precision) -> Precision:
    """FSDP2's plugin with the settings of Lightning's stock ``plugin``."""
    return engine_precision(plugin, _CLASSES, _scaler, owner="sharded_fsdp2")
