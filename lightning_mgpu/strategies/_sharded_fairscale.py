"""The FairScale side of the ``sharded`` strategy: OSS, ShardedDataParallel and ShardedGradScaler.

This module imports FairScale at the top, so it is imported only after
``require("fairscale", ...)`` succeeded (see :mod:`lightning_mgpu.strategies.sharded`).
FairScale 0.4.13 is the last release (2022); the private attributes read here are pinned to it.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from fairscale.nn.data_parallel import ShardedDataParallel
from fairscale.optim import OSS
from fairscale.optim.grad_scaler import ShardedGradScaler
from torch import nn
from torch.optim import Optimizer

# Keyword arguments ShardedDataParallel accepts besides the module and the optimizers.
SDP_OPTIONS = frozenset(inspect.signature(ShardedDataParallel.__init__).parameters) - {"self", "module", "sharded_optimizer"}

__all__ = [
    "OSS",
    "SDP_OPTIONS",
    "ShardedDataParallel",
    "ShardedGradScaler",
    "make_oss",
    "params_not_reduced",
    "reduce_in_fixed_order",
    "remove_grad_hooks",
    "sharded_grad_scaler",
    "wrap_module",
]


def make_oss(broadcast_fp16: bool) -> Any:
    """A factory for :func:`~lightning_mgpu.strategies._sharded_optim.rebuild_optimizer` that builds OSS."""

    def factory(param_groups: list[dict[str, Any]], optim_cls: type[Optimizer], defaults: dict[str, Any]) -> OSS:
        return OSS(params=param_groups, optim=optim_cls, broadcast_fp16=broadcast_fp16, **defaults)

    return factory


def _keep_bucketed_grads_on_zero_grad(optimizer: OSS, module: ShardedDataParallel) -> None:
    """Make ``optimizer.zero_grad()`` zero-fill the gradients that are views of ShardedDataParallel's buckets.

    With ``reduce_buffer_size > 0`` small gradients are views into a flat reduce bucket. torch >= 2.0's
    ``zero_grad()`` sets them to ``None``; the next backward then allocates fresh gradients outside the
    bucket and ShardedDataParallel reduces the stale bucket instead: the ranks silently diverge.
    FairScale's own ``ShardedDataParallel.zero_grad`` handles this; Lightning calls the optimizer's.
    """

    def zero_grad(set_to_none: bool = True) -> None:
        bucketed = {id(p) for p, in_bucket in zip(module._trainable_params, module._should_bucket_grad) if in_bucket}
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if set_to_none and id(param) not in bucketed:
                    param.grad = None
                    continue
                if param.grad.grad_fn is not None:
                    param.grad.detach_()
                else:
                    param.grad.requires_grad_(False)
                param.grad.zero_()

    # An instance attribute, so that LightningOptimizer (which copies the instance dict) uses it too.
    optimizer.zero_grad = zero_grad  # type: ignore[method-assign]


def wrap_module(module: nn.Module, optimizers: list[OSS], **kwargs: Any) -> ShardedDataParallel:
    """Wrap ``module`` in ShardedDataParallel for the given OSS optimizers."""
    wrapped = ShardedDataParallel(module, sharded_optimizer=optimizers, **kwargs)
    if wrapped._use_buckets:
        for optimizer in optimizers:
            _keep_bucketed_grads_on_zero_grad(optimizer, wrapped)
    return wrapped


def remove_grad_hooks(module: ShardedDataParallel) -> None:
    """Detach the reduce hooks from the parameters' gradient accumulators.

    They would otherwise outlive the wrapper and issue collectives in a later, unrelated backward.
    """
    while module._grad_hooks:
        module._grad_hooks.pop().remove()
    module._grad_accs = []
    module._manual_reduce = []


def params_not_reduced(module: ShardedDataParallel) -> list[torch.Tensor]:
    """Trainable parameters whose gradient this rank did not reduce in the last backward.

    Empty while accumulating (``no_sync``), where nothing is reduced on purpose.
    """
    if module._should_accumulate_grads or not module.training:
        return []
    return [p for p, pending in zip(module._trainable_params, module._grad_to_be_reduced) if pending]


def reduce_in_fixed_order(module: ShardedDataParallel) -> None:
    """Reduce every trainable gradient now, in the same order on every rank; missing ones count as zero.

    ShardedDataParallel normally issues one reduce per parameter from its gradient hook, in the order
    autograd happens to finish them. If ranks use different parameters their graphs differ, the orders
    differ and the collectives mismatch. Called after a backward run under ``no_sync()``, this walks the
    parameters in ShardedDataParallel's own (rank-independent) order instead.
    """
    for param in module._trainable_params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
    if any(module._grad_to_be_reduced):
        module.reduce()


def sharded_grad_scaler(scaler: torch.amp.GradScaler) -> ShardedGradScaler:
    """A ShardedGradScaler with the settings of ``scaler``.

    Each rank holds only its shard of the gradients, so the inf/NaN check must be all-reduced, or one
    rank skips a step that another takes.
    """
    if not scaler.is_enabled():
        # A disabled torch scaler (e.g. built without CUDA) has no settings to carry over.
        return ShardedGradScaler(enabled=False)
    return ShardedGradScaler(
        init_scale=scaler.get_scale(),
        growth_factor=scaler.get_growth_factor(),
        backoff_factor=scaler.get_backoff_factor(),
        growth_interval=scaler.get_growth_interval(),
        enabled=scaler.is_enabled(),
    )
