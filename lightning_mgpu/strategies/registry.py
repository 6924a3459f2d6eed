"""Registration of the bundle's strategy names in Lightning's ``StrategyRegistry``.

Lightning resolves ``Trainer(strategy="name")`` through ``lightning.pytorch.strategies.StrategyRegistry``
and has no entry-point group for strategies, so the names must be registered by importing
``lightning_mgpu``. Registration is idempotent and never touches Lightning's own names.

Each strategy class declares its names in ``register_strategies`` (Lightning's own pattern); this module
imports the strategy packages and is never imported by them, so names live in one place per class.
"""

from __future__ import annotations

from typing import Any, cast

from lightning.pytorch.strategies import Strategy

from lightning_mgpu.strategies.ddp2 import DDP2Strategy
from lightning_mgpu.strategies.dp import DataParallelStrategy
from lightning_mgpu.strategies.fsdp2 import FSDP2Strategy
from lightning_mgpu.strategies.horovod import HorovodStrategy
from lightning_mgpu.strategies.sharded import ShardedStrategy, ZeroStrategy
from lightning_mgpu.utilities.namespace_guard import guard_mixed_namespaces


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


class _IdempotentRegistry:
    """What each strategy's ``register_strategies(registry)`` is handed: ``register`` goes through
    :func:`register_strategy`, so the classes call it exactly as Lightning's own strategies do."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def register(self, name: str, strategy: type[Strategy], description: str = "", **init_params: Any) -> None:
        register_strategy(self._registry, name, strategy, description, **init_params)

    def __contains__(self, name: object) -> bool:
        return name in self._registry


class _Recorder(dict):
    """A throw-away registry: collects the names and entries the classes would register."""

    def register(self, name: str, strategy: type[Strategy], description: str = "", **init_params: Any) -> None:
        self[name] = {"strategy": strategy, "description": description, "init_params": init_params}


def bundle_strategy_classes() -> list[type[Strategy]]:
    """The bundle's strategy classes, each of which registers its own names."""
    return [DataParallelStrategy, DDP2Strategy, HorovodStrategy, ShardedStrategy, ZeroStrategy, FSDP2Strategy]


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

        # This namespace's Trainer also names the right import when handed the other namespace's classes.
        guard_mixed_namespaces()
    names = list(_bundle_entries())
    view = _IdempotentRegistry(registry)
    for cls in bundle_strategy_classes():
        cls.register_strategies(cast(Any, view))  # Lightning types the registry as its dict; ours has its `register`
    return names


def _bundle_entries() -> dict[str, dict[str, Any]]:
    recorder = _Recorder()
    for cls in bundle_strategy_classes():
        cls.register_strategies(cast(Any, recorder))
    return recorder


def strategy_dependency(name: str) -> str | None:
    """The optional package a registered bundle name needs (``None``: torch alone, or not a bundle name)."""
    entry = _bundle_entries().get(name)
    if entry is None:
        return None
    return getattr(entry["strategy"], "optional_dependency", None)


# Every name the bundle registers, in registration order, as the classes declare them (the one source).
BUNDLE_STRATEGY_NAMES: tuple[str, ...] = tuple(_bundle_entries())
