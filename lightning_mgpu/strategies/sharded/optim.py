"""Backend-neutral helpers of the ``sharded`` strategy: rebuilding optimizers as sharded ones (telling them apart,
scheduler re-binding and measuring the state a process holds are shared: :mod:`lightning_mgpu.utilities.optimizers`).

Nothing here imports FairScale; :mod:`lightning_mgpu.strategies.sharded.fairscale` holds what does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from torch.optim import Optimizer

# Builds a sharded optimizer from (param groups, optimizer class, optimizer defaults).
ShardedOptimizerFactory = Callable[[list[dict[str, Any]], type[Optimizer], dict[str, Any]], Optimizer]


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
