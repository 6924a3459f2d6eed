"""What one benchmark writes for the suite (``--result PATH``): every round of every arm, and the ratios to take.

Schema (JSON)::

    {"name": "horovod", "unit": "s/step",
     "arms": {"raw": {"step_s": [...per round...]}, "horovod": {"step_s": [...]}},
     "ratios": [{"label": "horovod / raw Horovod", "num": "horovod", "den": "raw", "metric": "step_s", "goal": 1.03}],
     "figures": {"sharded / ddp model state (rank 0)": {"value": 0.625, "goal": 0.625, "higher_is_better": false}},
     "memory": {"ddp": [bytes per rank], ...}, "memory_label": "model state per rank", "failed": {"arm": "error"},
     "config": {...}, "notes": [...],
     "scaling": {"samples_per_s": {"ddp": {"1": [...per round...], "2": [...]}}}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict


class RatioSpec(TypedDict, total=False):
    label: str
    num: str
    den: str
    metric: str
    goal: float | None
    higher_is_better: bool


def ratio(
    label: str, num: str, den: str, metric: str = "step_s", goal: float | None = None, higher_is_better: bool = False
) -> RatioSpec:
    """A ratio for the suite to take over the rounds of two arms."""
    return RatioSpec(label=label, num=num, den=den, metric=metric, goal=goal, higher_is_better=higher_is_better)


def figure(value: float, goal: float | None = None, higher_is_better: bool = False) -> dict[str, Any]:
    """A single figure for the report, with its verdict when it has a goal."""
    out: dict[str, Any] = {"value": value, "goal": goal, "higher_is_better": higher_is_better}
    if goal is not None:
        out["verdict"] = "met" if (value >= goal if higher_is_better else value <= goal) else "not met"
    return out


def write_result(
    path: Path | None,
    *,
    name: str,
    arms: dict[str, dict[str, list[float]]],
    ratios: list[RatioSpec],
    unit: str = "s/step",
    figures: dict[str, dict[str, Any]] | None = None,
    memory: dict[str, list[float]] | None = None,
    memory_label: str | None = None,
    failed: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    scaling: dict[str, dict[str, dict[str, list[float]]]] | None = None,
) -> None:
    """Print the benchmark's table (the one ``benchmarks/run.py`` prints for it) and write its raw figures to ``path``
    for the suite; a run by hand passes ``None``."""
    from .report import BenchRun, terminal_table

    payload = {
        "name": name,
        "unit": unit,
        "arms": arms,
        "ratios": list(ratios),
        "figures": figures or {},
        "memory": memory or {},
        "memory_label": memory_label,
        "failed": failed or {},
        "config": config or {},
        "notes": notes or [],
        "scaling": scaling or {},
    }
    print(
        "\n" + terminal_table([BenchRun(name, "", "ok", result=json.loads(json.dumps(payload, default=str)))]),
        flush=True,
    )
    if path is not None:
        Path(path).write_text(json.dumps(payload, indent=1, default=str))


def progress(done: int, total: int) -> None:
    """One line the suite's progress bar follows (``round i/N``)."""
    print(f"round {done}/{total}", flush=True)
