"""FairScale's pieces for :class:`~lightning_mgpu.strategies.sharded.ShardedStrategy`: OSS and ShardedDataParallel, each
function taking what it works on (its ShardedGradScaler is the precision plugin's: ``plugins/precision/fairscale.py``).

This module imports FairScale at the top, so the strategy imports it only after ``require("fairscale", ...)`` succeeded.
FairScale 0.4.13 is the last release (2022); the private attributes read here are pinned to it.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist
from fairscale.nn.data_parallel import ShardedDataParallel
from fairscale.optim import OSS
from torch import nn
from torch.optim import Optimizer

# Keyword arguments ShardedDataParallel accepts besides the module and the optimizers.
SDP_OPTIONS = frozenset(inspect.signature(ShardedDataParallel.__init__).parameters) - {
    "self",
    "module",
    "sharded_optimizer",
}

__all__ = [
    "OSS",
    "SDP_OPTIONS",
    "ShardedDataParallel",
    "arm_reduction",
    "bucket_safe_zero_grad",
    "follow_module_mode",
    "make_oss",
    "params_not_reduced",
    "reduce_in_fixed_order",
    "release_gradients",
    "remove_grad_hooks",
    "wrap_module",
]


def make_oss(broadcast_fp16: bool) -> Any:
    """A factory for :func:`~lightning_mgpu.strategies.sharded.optim.rebuild_optimizer` that builds OSS."""

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

    # An instance attribute: Lightning's automatic loop calls the OSS's own zero_grad. LightningOptimizer
    # (manual optimization's `self.optimizers()`) subclasses OSS's class, so it would find the class method
    # first; the strategy points each LightningOptimizer at this function as well.
    optimizer.zero_grad = zero_grad


def bucket_safe_zero_grad(optimizer: Optimizer) -> Any:
    """The bucket-safe ``zero_grad`` installed on ``optimizer`` by :func:`wrap_module`, or ``None``."""
    return vars(optimizer).get("zero_grad")


def wrap_module(module: nn.Module, optimizers: list[OSS], **kwargs: Any) -> ShardedDataParallel:
    """Wrap ``module`` in ShardedDataParallel for the given OSS optimizers."""
    wrapped = ShardedDataParallel(module, sharded_optimizer=optimizers, **kwargs)
    if wrapped._use_buckets:
        for optimizer in optimizers:
            _keep_bucketed_grads_on_zero_grad(optimizer, wrapped)
    return wrapped


def follow_module_mode(module: ShardedDataParallel) -> None:
    """Give the wrapper the train/eval mode of the module it wraps (the flag only, not the submodules').

    Lightning's validation loop calls ``trainer.model.eval()`` (this wrapper) but afterwards restores the modes of
    the LightningModule's submodules only, so the wrapper stays in eval mode. ShardedDataParallel in eval mode
    removes its gradient hooks and reduces nothing: every later step would use local gradients, and the ranks'
    models drift apart without an error. Called before each training step.
    """
    module.training = module.module.training


def remove_grad_hooks(module: ShardedDataParallel) -> None:
    """Detach the reduce hooks from the parameters' gradient accumulators.

    They would otherwise outlive the wrapper and issue collectives in a later, unrelated backward.
    """
    while module._grad_hooks:
        module._grad_hooks.pop().remove()
    module._grad_accs = []
    module._manual_reduce = []


def params_not_reduced(module: ShardedDataParallel) -> list[torch.Tensor]:
    """Parameters that require grad and whose gradient this rank did not reduce in the last backward.

    Empty while accumulating (``no_sync``), where nothing is reduced on purpose. A parameter frozen for this
    backward (``requires_grad=False``, e.g. by ``toggle_model``) cannot receive a gradient and is not counted.
    """
    if module._should_accumulate_grads or not module.training:
        return []
    return [
        p for p, pending in zip(module._trainable_params, module._grad_to_be_reduced) if pending and p.requires_grad
    ]


def arm_reduction(module: ShardedDataParallel) -> bool:
    """Prepare ShardedDataParallel to reduce, in the coming backward, the parameters that require grad now.

    ShardedDataParallel marks every trainable parameter "to be reduced" in its ``forward`` only, and unmarks
    each one as it reduces it. Manual optimization can run several backward passes per forward: a GAN runs
    one per optimizer, each inside ``toggle_model``, which sets ``requires_grad=False`` on the other
    optimizers' parameters. Without re-arming, the second backward reduces nothing and its gradients stay
    local. Re-arming before each backward gives DDP's semantics: every backward outside ``no_sync`` reduces.

    Returns:
        Whether some of ShardedDataParallel's trainable parameters are frozen for this backward. Those must
        not be reduced, so FairScale's hooks and buckets cannot be used (see :func:`reduce_in_fixed_order`).
    """
    active = [p.requires_grad for p in module._trainable_params]
    module._grad_to_be_reduced = list(active)
    module._bucket_flush_callback_set = False
    for bucket in module._bucket_list:
        bucket.reset_checked_in()
    return not all(active)


def reduce_in_fixed_order(
    module: ShardedDataParallel, missing_as_zero: bool = True, every_rank: bool = False
) -> list[torch.Tensor]:
    """Reduce every pending gradient now, in the same order on every rank.

    ShardedDataParallel normally issues one reduce per parameter (or bucket) from its gradient hooks, in the
    order autograd happens to finish them. If ranks use different parameters their graphs differ, the
    orders differ and the collectives mismatch. Called after a backward run under ``no_sync()``, this walks
    the parameters in ShardedDataParallel's own (rank-independent) order instead.

    Args:
        module: the wrapper, after a backward under ``no_sync()`` and :func:`arm_reduction`.
        missing_as_zero: a pending parameter without a gradient counts as zero (``find_unused_parameters``).
            Otherwise nothing is reduced, so that no rank waits in a collective the others never issue, and
            :func:`params_not_reduced` names the parameters.
        every_rank: all-reduce instead, and keep every gradient, in its parameter's dtype, on every rank (what DDP
            leaves for ``on_after_backward``); the caller releases the returned ones with :func:`release_gradients`.

    Returns:
        With ``every_rank``: the parameters whose gradient belongs to another rank's shard (``[]`` otherwise).
    """
    params = module._trainable_params
    pending = [i for i, flagged in enumerate(module._grad_to_be_reduced) if flagged]
    if not pending:
        return []
    missing = [i for i in pending if params[i].grad is None]
    if missing and not missing_as_zero:
        return []
    for i in missing:
        params[i].grad = torch.zeros_like(params[i])
    if every_rank:
        return _all_reduce_each(module, pending)
    if len(pending) == len(params):
        module.reduce()  # every trainable parameter: FairScale's own reduction, with its buckets
    else:
        _reduce_each(module, pending)
    return []


def _gradient_to_reduce(module: ShardedDataParallel, index: int, in_bucket: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Trainable parameter ``index`` and its gradient, made ready for a collective as FairScale's own hooks make it:
    marked reduced, scaled by 1 / world size, and cast to fp16 when ``reduce_fp16`` (a bucketed gradient keeps its
    bucket's dtype)."""
    param = module._trainable_params[index]
    module._grad_to_be_reduced[index] = False
    assert param.grad is not None
    param.grad.mul_(module._world_size_scaling)
    if module._reduce_fp16 and not in_bucket:
        param.grad.data = param.grad.data.half()
    return param, param.grad


@torch.no_grad()
def _all_reduce_each(module: ShardedDataParallel, indices: list[int]) -> list[torch.Tensor]:
    """All-reduce these parameters' gradients (averaged, as FairScale's reduce would leave them on the owner) on every
    rank, and return the parameters owned by other ranks whose gradients are not views of a bucket (those hold no
    memory of their own)."""
    params = module._trainable_params
    bucketed = module._should_bucket_grad if module._use_buckets else [False] * len(params)
    pending = []
    for i in indices:
        param, grad = _gradient_to_reduce(module, i, bucketed[i])
        pending.append((dist.all_reduce(grad.data, group=module._process_group, async_op=True), i))
    others = []
    for work, i in pending:
        work.wait()
        param = params[i]
        assert param.grad is not None
        param.grad.data = param.grad.data.to(dtype=param.dtype)
        if module._trainable_param_to_rank[param] != module._rank and not bucketed[i]:
            others.append(param)
    return others


def release_gradients(params: list[torch.Tensor]) -> None:
    """Drop these gradients, as FairScale's reduce hooks drop the gradients of the parameters another rank owns."""
    for param in params:
        param.grad = None


@torch.no_grad()
def _reduce_each(module: ShardedDataParallel, indices: list[int]) -> None:
    """Reduce these parameters' gradients one by one to their owners, leaving the other parameters alone.

    FairScale's buckets cannot be used: a bucket holds the gradients of frozen parameters too (e.g. the
    discriminator's, accumulated over earlier micro-batches), which must not be reduced yet. A bucketed
    gradient is a contiguous view of its bucket, so it is reduced in place.
    """
    params = module._trainable_params
    bucketed = module._should_bucket_grad if module._use_buckets else [False] * len(params)
    pending = []
    for i in indices:
        param, grad = _gradient_to_reduce(module, i, bucketed[i])
        owner = module._trainable_param_to_rank[param]
        work = dist.reduce(
            grad.data, dst=module._local_to_global_rank[owner], group=module._process_group, async_op=True
        )
        pending.append((work, param, owner, bucketed[i]))
    for work, param, owner, in_bucket in pending:
        work.wait()
        if owner != module._rank:
            if not in_bucket:
                param.grad = None  # ZeRO-2: only the owner keeps the reduced gradient (a bucket keeps its memory)
        else:
            assert param.grad is not None
            param.grad.data = param.grad.data.to(dtype=param.dtype)
