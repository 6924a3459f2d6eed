"""Precision on sharded gradients, shared by the engines that shard them (FairScale and FSDP2).

With ZeRO-2/3 each rank holds only its shard of the reduced gradients. A plain ``GradScaler`` would then find inf/NaN
on one rank only and let the ranks disagree on skipping a step, and ``clip_grad_norm_`` would compute a partial norm
on each rank. Each engine has its own precision plugins for the clipping (``fairscale.py``, ``fsdp2.py``);
the scaler that agrees across ranks and the step that builds an engine's plugin from the one the Trainer chose live
here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch.plugins.precision import HalfPrecision, MixedPrecision, Precision
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from typing_extensions import override

__all__ = ["ShardAwareGradScaler", "engine_precision", "is_shard_aware"]


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


def engine_precision(
    plugin: Precision,
    classes: Mapping[type[Precision], type[Precision]],
    shard_aware_scaler: Callable[[torch.amp.GradScaler, str], torch.amp.GradScaler],
    owner: str,
) -> Precision:
    """An engine's precision plugin with the settings of ``plugin``, the stock plugin the Trainer chose.

    A new object: Lightning's Trainer reads the plugin from the strategy, so nothing else holds the stock one.

    Args:
        plugin: Lightning's plugin (``32-true``, ``16-mixed``, ``bf16-mixed``, ``16-true``, ``bf16-true``, ``64-true``).
        classes: stock class -> the engine's subclass of it.
        shard_aware_scaler: builds the engine's inf/NaN-agreeing scaler from a plain one and the device.
        owner: the strategy's name, for the warning.
    """
    if type(plugin) in classes.values():
        return plugin
    target = classes.get(type(plugin))
    if target is None:
        # A precision plugin of the user's own: keep it, and say what it does not get.
        rank_zero_warn(
            f"strategy={owner!r} does not know the precision plugin {type(plugin).__qualname__}; gradient clipping by"
            " norm would use each rank's partial gradients instead of the global norm. Use one of Lightning's stock"
            " precision plugins (e.g. `precision='bf16-mixed'`), or clip by value."
        )
        return plugin
    if isinstance(plugin, MixedPrecision):
        scaler = plugin.scaler
        if scaler is not None and not is_shard_aware(scaler):
            scaler = shard_aware_scaler(scaler, plugin.device)
        return target(plugin.precision, plugin.device, scaler)  # type: ignore[call-arg]
    if isinstance(plugin, HalfPrecision):
        return target(plugin.precision)  # type: ignore[call-arg]
    return target()  # Precision, DoublePrecision: no settings
