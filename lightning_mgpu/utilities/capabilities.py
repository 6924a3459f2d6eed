"""What a strategy can do, as attributes its class declares, so that callers ask the strategy instead of its name.

Each bundle strategy class sets the attributes below that differ from the default; Lightning's own strategies set
none and get the defaults. Read them with :func:`capability`, from an instance, a class or a registered name. This
module imports no strategy (``utilities/`` sits below ``strategies/``; callbacks and launchers read it too).

Attributes:
    loads_node_batch: one process per node loads the node's whole batch and splits it across that node's devices
        (``dp``, ``ddp2``). Its loader batch is ``devices x`` the per-device batch, and the launcher starts one process
        per node, not one per device.
    syncs_across_processes: the strategy communicates between processes (every one but ``dp``, which trains in one
        process): under a launcher that starts several, one that does not would train independent copies.
    runs_under_horovodrun: the workers horovodrun starts are this strategy's ranks (``horovod``). Any other strategy
        under horovodrun would train one independent copy per worker.
    ray_incompatibility: why the strategy cannot run as a Ray Train worker, naming the one to use, or ``None``.
    install_hint: the command that installs what ``optional_dependency`` names, or ``None``.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {
    "loads_node_batch": False,
    "syncs_across_processes": True,
    "runs_under_horovodrun": False,
    "ray_incompatibility": None,
    "install_hint": None,
}


def capability(strategy: object, name: str) -> Any:
    """The capability ``name`` of ``strategy`` (an instance, a class, or a registered strategy name).

    Raises:
        KeyError: ``name`` is not one of :data:`DEFAULTS`, or ``strategy`` is a name nobody registered.
    """
    if name not in DEFAULTS:
        raise KeyError(f"unknown strategy capability {name!r}; known: {sorted(DEFAULTS)}")
    if isinstance(strategy, str):
        from lightning.pytorch.strategies import StrategyRegistry

        if strategy not in StrategyRegistry:
            raise KeyError(f"strategy {strategy!r} is not registered")
        strategy = StrategyRegistry[strategy]["strategy"]
    cls = strategy if isinstance(strategy, type) else type(strategy)
    return getattr(cls, name, DEFAULTS[name])
