"""Registration of the bundle's strategy names in Lightning's ``StrategyRegistry``.

Lightning resolves ``Trainer(strategy="name")`` through ``lightning.pytorch.strategies.StrategyRegistry``
and has no entry-point group for strategies, so the names must be registered by importing
``lightning_mgpu``. Registration is idempotent and never touches Lightning's own names.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import Strategy


class StrategyNameClashError(ValueError):
    """A bundle strategy name is already registered to a different strategy."""


def _same_entry(entry: dict[str, Any], strategy: type[Strategy], init_params: dict[str, Any]) -> bool:
    registered = entry.get("strategy")
    same_class = registered is strategy or (
        # A re-imported module (e.g. importlib.reload in a notebook) makes a new class object
        # with the same qualified name; that is still our registration.
        isinstance(registered, type)
        and registered.__module__ == strategy.__module__
        and registered.__qualname__ == strategy.__qualname__
    )
    return same_class and entry.get("init_params", {}) == init_params


def register_strategy(
    registry: Any,
    name: str,
    strategy: type[Strategy],
    description: str,
    **init_params: Any,
) -> None:
    """Register ``name`` once; re-registering the same class and arguments is a no-op.

    Args:
        registry: Lightning's ``StrategyRegistry`` (or a compatible dict-like registry).
        name: the name users pass as ``Trainer(strategy=name)``.
        strategy: the strategy class.
        description: a one-line description shown by ``python -m lightning_mgpu info``.
        **init_params: keyword arguments the class is built with for this name.

    Raises:
        StrategyNameClashError: ``name`` is already registered to a different class or arguments.
    """
    if name in registry:
        entry = registry[name]
        if _same_entry(entry, strategy, init_params):
            if entry.get("strategy") is not strategy:
                registry.register(name, strategy, description=description, override=True, **init_params)
            return
        other = entry.get("strategy")
        other_name = f"{getattr(other, '__module__', '?')}.{getattr(other, '__qualname__', other)}"
        raise StrategyNameClashError(
            f"Cannot register strategy name {name!r} for {strategy.__module__}.{strategy.__qualname__}: it is"
            f" already registered to {other_name} with init_params={entry.get('init_params')}. Another package"
            f" registered the same name. Pass the strategy instance instead, e.g."
            f" `Trainer(strategy={strategy.__qualname__}(...))`, or remove the other registration with"
            f" `StrategyRegistry.remove({name!r})` before importing lightning_mgpu."
        )
    registry.register(name, strategy, description=description, **init_params)


def bundle_strategy_classes() -> list[type[Strategy]]:
    """The bundle's strategy classes, each of which registers its own names."""
    from lightning_mgpu.strategies.dp import DataParallelStrategy
    from lightning_mgpu.strategies.horovod import HorovodStrategy
    from lightning_mgpu.strategies.sharded import ShardedStrategy

    return [DataParallelStrategy, HorovodStrategy, ShardedStrategy]


def register_bundle_strategies(registry: Any = None) -> list[str]:
    """Register every bundle strategy name. Safe to call any number of times.

    Args:
        registry: defaults to ``lightning.pytorch.strategies.StrategyRegistry``.

    Returns:
        The names registered by the bundle.

    Raises:
        StrategyNameClashError: one of the names is taken by a different strategy.
    """
    if registry is None:
        from lightning.pytorch.strategies import StrategyRegistry as registry  # noqa: N811
    names: list[str] = []
    for cls in bundle_strategy_classes():
        names.extend(cls.register_strategies(registry) or [])
    # Lightning's own names (ddp, ddp_spawn, ...) must never be replaced by the bundle.
    if set(names) & _LIGHTNING_OWN:
        raise RuntimeError(f"lightning_mgpu must not re-register Lightning's own names: {set(names) & _LIGHTNING_OWN}")
    return names


_LIGHTNING_OWN = frozenset({"ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "fsdp", "deepspeed", "single_device"})
BUNDLE_STRATEGY_NAMES = ("dp", "horovod", "sharded", "sharded_spawn", "ddp_sharded", "ddp_sharded_spawn")
