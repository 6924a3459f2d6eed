"""Backend-neutral helpers of the ``sharded`` strategy: rebuilding optimizers as sharded ones and measuring
the optimizer state a process holds (scheduler re-binding is shared, in :mod:`lightning_mgpu.utilities.optimizers`).

Nothing here imports FairScale; :mod:`lightning_mgpu.strategies.sharded.fairscale` holds what does.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch.optim import Optimizer

from lightning_mgpu.utilities.optimizers import unwrap_optimizer

# Builds a sharded optimizer from (param groups, optimizer class, optimizer defaults).
ShardedOptimizerFactory = Callable[[list[dict[str, Any]], type[Optimizer], dict[str, Any]], Optimizer]


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

        from lightning_mgpu.strategies.sharded.optim import local_optimizer_state_bytes
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


def copy_param_groups(optimizer: Optimizer) -> list[dict[str, Any]]:
    """The optimizer's param groups as fresh dicts.

    ``Optimizer.__init__`` stores the group dicts it is given and mutates them, so the old and the
    new optimizer must never share them.
    """
    return [{**group, "params": list(group["params"])} for group in optimizer.param_groups]


def constructor_defaults(cls: type[Optimizer], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``defaults`` that ``cls.__init__`` accepts.

    ``defaults`` may hold keys the constructor does not take (torch's ``AdamW`` records
    ``decoupled_weight_decay``, which only ``Adam`` accepts). Nothing is lost by dropping them: every copied
    param group carries all its hyperparameters.
    """
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return dict(defaults)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(defaults)
    return {k: v for k, v in defaults.items() if k in parameters}


def rebuild_optimizer(optimizer: Optimizer, factory: ShardedOptimizerFactory, backend: str) -> Optimizer:
    """Rebuild ``optimizer`` as a sharded optimizer with the same class, hyperparameters and groups.

    Any state the optimizer already holds (rare: a ``configure_optimizers`` that loads one) is carried
    over; loading a full state dict into OSS/ZeRO is local to each rank and keeps only its shard.

    Raises:
        TypeError: the optimizer cannot be rebuilt from its class and ``defaults`` (e.g. its constructor needs
            an argument that ``defaults`` does not record).
    """
    cls = type(optimizer)
    defaults = constructor_defaults(cls, optimizer.defaults)
    try:
        sharded = factory(copy_param_groups(optimizer), cls, defaults)
    except TypeError as err:
        raise TypeError(
            f"strategy='sharded' (backend={backend!r}) rebuilds each optimizer from its class and `defaults`, but"
            f" {cls.__module__}.{cls.__qualname__}(params, **defaults) failed with defaults {sorted(defaults)}: {err}."
            " Record every constructor argument in the optimizer's `defaults`, or use strategy='ddp'."
        ) from err
    if optimizer.state:
        sharded.load_state_dict(optimizer.state_dict())
    return sharded
