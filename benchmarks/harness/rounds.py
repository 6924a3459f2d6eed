"""Interleaved rounds: every arm once per round, the order rotated, so that drift in machine load hits all alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def interleave(
    arms: Mapping[str, Callable[[], T]],
    rounds: int,
    *,
    report: bool = True,
    describe: Callable[[dict[str, T]], str] | None = None,
) -> dict[str, list[T]]:
    """Run each arm once per round; round ``r`` starts at arm ``r mod len(arms)``, so no arm is always first (cold
    caches) or last. After each round prints ``round i/N`` (what ``benchmarks/run.py``'s progress bar follows),
    followed by ``describe(this round's results)`` if given; ``report=False`` on all but one rank.

    Returns:
        Each arm's results, one per round, in round order (a ratio pairs them round by round).

    Example::

        times = interleave({"ddp": lambda: fit("ddp"), "raw": raw_loop}, rounds=5)
        write_result(path, name="ddp", arms={k: {"step_s": v} for k, v in times.items()}, ratios=[...])
    """
    names = list(arms)
    results: dict[str, list[T]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        this_round = {name: arms[name]() for name in names[shift:] + names[:shift]}
        for name, value in this_round.items():
            results[name].append(value)
        if report:
            print(f"round {r + 1}/{rounds}" + (f": {describe(this_round)}" if describe else ""), flush=True)
    return results
