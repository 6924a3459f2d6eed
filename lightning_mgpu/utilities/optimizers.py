"""Optimizer plumbing for strategies and precision plugins: the optimizer inside Lightning's wrapper, and LR schedulers
re-bound to the optimizers a strategy put in place of the user's.

A strategy that replaces the user's optimizers (``horovod`` wraps them in ``hvd.DistributedOptimizer``, ``sharded``
rebuilds them as OSS/ZeRO) must point the LR schedulers at the replacements, including the schedulers that a
``SequentialLR``/``ChainedScheduler`` holds, and mark the new ``step`` the way torch's schedulers expect, or torch warns
that ``optimizer.step()`` was overridden.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from typing import Any

from torch.optim import Optimizer

__all__ = ["mark_step_calls", "rebind_scheduler", "rebind_schedulers", "unwrap_optimizer"]


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
