"""Optimizer plumbing for strategies and precision plugins: the optimizer inside Lightning's wrapper, sharded optimizers
told apart and the optimizer state a process holds measured, and LR schedulers re-bound to the optimizers a strategy put
in place of the user's.

A strategy that replaces the user's optimizers (``horovod`` wraps them in ``hvd.DistributedOptimizer``, ``sharded``
rebuilds them as OSS/ZeRO) must point the LR schedulers at the replacements, including the schedulers that a
``SequentialLR``/``ChainedScheduler`` holds, and mark the new ``step`` the way torch's schedulers expect, or torch warns
that ``optimizer.step()`` was overridden.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.optim import Optimizer

__all__ = [
    "is_sharded_optimizer",
    "local_optimizer",
    "local_optimizer_state_bytes",
    "mark_step_calls",
    "rebind_scheduler",
    "rebind_schedulers",
    "unwrap_optimizer",
]


def unwrap_optimizer(optimizer: Any) -> Any:
    """The optimizer inside a Lightning ``LightningOptimizer``, or ``optimizer`` itself.

    Only the instance's own ``_optimizer`` counts: ``LightningOptimizer`` forwards unknown attributes to the
    optimizer it wraps, and Horovod's ``DistributedOptimizer`` classes are subclassed by it, so a class-level
    or forwarded lookup could find the wrong object.
    """
    while True:
        inner = getattr(optimizer, "__dict__", {}).get("_optimizer")
        if inner is None or inner is optimizer:
            return optimizer
        optimizer = inner


def is_sharded_optimizer(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a FairScale ``OSS`` or a torch ``ZeroRedundancyOptimizer``.

    FairScale is looked up only if something already imported it, so this never imports it.
    """
    optimizer = unwrap_optimizer(optimizer)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    if isinstance(optimizer, ZeroRedundancyOptimizer):
        return True
    oss_module = sys.modules.get("fairscale.optim.oss")
    return oss_module is not None and isinstance(optimizer, oss_module.OSS)


def local_optimizer(optimizer: Any) -> Optimizer:
    """The optimizer that holds this process's state: the shard's optimizer for OSS/ZeRO, else itself."""
    optimizer = unwrap_optimizer(optimizer)
    return optimizer.optim if is_sharded_optimizer(optimizer) else optimizer


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        # A DTensor (FSDP2's optimizer state) reports its global size; this process holds only the local shard.
        yield value.to_local() if hasattr(value, "to_local") else value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def local_optimizer_state_bytes(optimizer: Any) -> int:
    """Bytes of optimizer state (e.g. Adam's ``exp_avg``/``exp_avg_sq``/``step``) held by this process.

    For a sharded optimizer this counts only the local shard; tensors shared between entries are
    counted once.

    Example::

        from lightning_mgpu.utilities.optimizers import local_optimizer_state_bytes
        print(local_optimizer_state_bytes(trainer.optimizers[0]))  # about 1/N of the ddp figure
    """
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in _tensors(dict(local_optimizer(optimizer).state)):
        key = (tensor.untyped_storage().data_ptr(), int(tensor.storage_offset()))
        if key in seen:
            continue
        seen.add(key)
        total += tensor.numel() * tensor.element_size()
    return total


def mark_step_calls(optimizer: Optimizer) -> None:
    """Record calls of ``optimizer.step`` as ``LRScheduler.__init__`` does for the optimizer it is built with.

    Without this, a scheduler re-bound to a new optimizer warns "Seems like `optimizer.step()` has been
    overridden after learning rate scheduler initialization". A weak reference keeps the optimizer
    collectable; ``functools.wraps`` keeps the name and docstring of ``step``.
    """
    if hasattr(optimizer.step, "_wrapped_by_lr_sched"):
        return
    opt_ref = weakref.ref(optimizer)
    step = type(optimizer).step

    @functools.wraps(step)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        opt = opt_ref()
        assert opt is not None  # the wrapper lives on the optimizer: called, the optimizer is alive
        opt._opt_called = True  # type: ignore[attr-defined]
        return step(opt, *args, **kwargs)

    wrapper._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    optimizer.step = wrapper  # type: ignore[method-assign]


def rebind_scheduler(scheduler: Any, replacements: Mapping[int, Optimizer]) -> None:
    """Point ``scheduler``, and the schedulers it chains (``SequentialLR``, ``ChainedScheduler``), at new optimizers.

    Args:
        scheduler: an LR scheduler (anything with an ``optimizer`` attribute).
        replacements: ``id(old optimizer) -> new optimizer``.
    """
    old = getattr(scheduler, "optimizer", None)
    if old is not None and id(old) in replacements:
        scheduler.optimizer = replacements[id(old)]
        mark_step_calls(scheduler.optimizer)
    for child in getattr(scheduler, "_schedulers", None) or ():
        rebind_scheduler(child, replacements)


def rebind_schedulers(scheduler_configs: Any, replacements: Mapping[int, Optimizer]) -> None:
    """:func:`rebind_scheduler` for each of Lightning's ``LRSchedulerConfig`` objects."""
    for config in scheduler_configs:
        rebind_scheduler(config.scheduler, replacements)
