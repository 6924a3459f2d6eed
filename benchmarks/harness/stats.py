"""Paired ratios: arms that ran side by side, round by round, compared as the median of per-round ratios."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RatioSummary:
    """``num / den`` over interleaved rounds.

    Attributes:
        label: what is compared, e.g. ``"horovod / raw Horovod"``.
        median, low, high: the median, minimum and maximum of the per-round ratios.
        pairs: rounds in which both arms ran.
        goal: the target for the median, if any; ``higher_is_better`` says which side of it meets it.
    """

    label: str
    median: float
    low: float
    high: float
    pairs: int
    goal: float | None = None
    higher_is_better: bool = False

    @property
    def straddles_one(self) -> bool:
        """Whether the rounds disagree on which arm is faster: the difference is within the noise."""
        return self.low < 1.0 < self.high

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        return self.median >= self.goal if self.higher_is_better else self.median <= self.goal

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "straddles_one": self.straddles_one, "met": self.met}


def paired_ratios(num: list[float], den: list[float]) -> list[float]:
    """Per-round ratios ``num[i] / den[i]``, skipping rounds where either arm has no figure.

    Raises:
        ValueError: the arms have different numbers of rounds (they did not run side by side).
    """
    if len(num) != len(den):
        raise ValueError(f"paired arms need the same rounds: {len(num)} vs {len(den)}")
    return [a / b for a, b in zip(num, den) if a is not None and b is not None and b > 0]


def summarize(
    label: str, num: list[float], den: list[float], goal: float | None = None, higher_is_better: bool = False
) -> RatioSummary:
    """The :class:`RatioSummary` of ``num / den``.

    Raises:
        ValueError: no round has both figures.

    Example::

        summarize("horovod / raw", [1.1, 1.0, 1.2], [1.0, 1.0, 1.0], goal=1.03).median  # 1.1
    """
    ratios = paired_ratios(num, den)
    if not ratios:
        raise ValueError(f"{label}: no round has both figures")
    return RatioSummary(label, statistics.median(ratios), min(ratios), max(ratios), len(ratios), goal, higher_is_better)


def median_interval(marks: list[float], warmup: int, steps: int) -> float:
    """The median time between consecutive step starts ``marks``, over ``steps`` steps after ``warmup`` untimed ones."""
    timed = marks[warmup : warmup + steps + 1]
    return statistics.median(b - a for a, b in zip(timed[:-1], timed[1:]))


def median_duration(starts: list[float], ends: list[float], warmup: int) -> float:
    """The median of ``end - start`` over the steps after ``warmup`` untimed ones."""
    return statistics.median(e - s for s, e in list(zip(starts, ends))[warmup:])
