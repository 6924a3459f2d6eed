"""The suite's report: a Markdown summary, the raw figures as JSON, and PNG plots (matplotlib)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .stats import RatioSummary, summarize


@dataclass
class BenchRun:
    """One benchmark's outcome: ``status`` is ``ok``, ``failed`` (``error`` says why) or ``skipped`` (``error``:
    why)."""

    name: str
    what: str
    status: str
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def summaries(self) -> list[RatioSummary | tuple[str, str]]:
        """Each requested ratio, or ``(label, error)`` for one whose arm failed or has no rounds."""
        out: list[RatioSummary | tuple[str, str]] = []
        arms, failed = self.result.get("arms", {}), self.result.get("failed", {})
        for spec in self.result.get("ratios", []):
            label, metric = spec["label"], spec.get("metric", "step_s")
            bad = [a for a in (spec["num"], spec["den"]) if a in failed]
            if bad:
                out.append((label, f"arm {bad[0]!r} failed: {failed[bad[0]]}"))
                continue
            try:
                num, den = arms[spec["num"]][metric], arms[spec["den"]][metric]
                out.append(summarize(label, num, den, spec.get("goal"), spec.get("higher_is_better", False)))
            except (KeyError, ValueError) as err:
                out.append((label, f"no figure: {err}"))
        return out


def _fmt_value(value: float) -> str:
    """Three decimals, or scientific notation for small non-zero figures (parity differences of 1e-8)."""
    return f"{value:.2e}" if value and abs(value) < 1e-3 else f"{value:.3f}"


def _fmt_goal(goal: float | None, higher: bool) -> str:
    return "" if goal is None else f"{'≥' if higher else '≤'} {goal:g}"


def _verdict(s: RatioSummary) -> str:
    met = {True: "met", False: "**not met**", None: ""}[s.met]
    return f"{met}{' (within noise: rounds straddle 1.0)' if s.straddles_one else ''}".strip()


def summary_rows(runs: list[BenchRun], width: int, plain: bool = False) -> list[tuple[str, ...]]:
    """The summary's rows, one per ratio or figure: benchmark, comparison, median, min-max, rounds, goal and verdict
    (an error cut to ``width`` characters where a benchmark or an arm failed). ``plain``: for a terminal, no
    Markdown."""
    dash = "-" if plain else " – "
    rows: list[tuple[str, ...]] = []
    for run in runs:
        if run.status != "ok":
            rows.append(
                (run.name, "-" if plain else "—", run.status, "", "", "", (run.error.splitlines() or [""])[-1][:width])
            )
            continue
        for s in run.summaries():
            if isinstance(s, tuple):
                rows.append((run.name, s[0], "failed", "", "", "", s[1][:width]))
            else:
                verdict = _verdict(s).replace("**", "") if plain else _verdict(s)
                rows.append(
                    (
                        run.name,
                        s.label,
                        f"{s.median:.3f}",
                        f"{s.low:.3f}{dash}{s.high:.3f}",
                        str(s.pairs),
                        _fmt_goal(s.goal, s.higher_is_better),
                        verdict,
                    )
                )
        for label, fig in run.result.get("figures", {}).items():
            goal = _fmt_goal(fig.get("goal"), fig.get("higher_is_better", False))
            rows.append((run.name, label, _fmt_value(fig["value"]), "", "", goal, fig.get("verdict", "")))
    return rows


def markdown(runs: list[BenchRun], machine: dict[str, Any], command: str, plots: dict[str, list[str]]) -> str:
    """The report's text."""
    v = machine["versions"]
    lines = [
        f"# lightning_mgpu benchmark report ({machine['date']})",
        "",
        "- **Command:**"
        f" {command if '`' in command else f'`{command}`'}",  # an updated report's command quotes its parts
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores; GPUs: {', '.join(machine['gpus']) or 'none'};"
        f" interconnect: {machine['interconnect']}; {machine['os']}",
        "- **Versions:** " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + f", Python {machine['python']}",
        "- **Method:** arms run side by side in interleaved rounds (the order rotates); a figure is the median of the"
        " per-round ratios, with the smallest and largest round. Rounds that straddle 1.0 mean the difference is"
        " within the noise. Absolute times are context only.",
        "",
        "## Summary",
        "",
        "| benchmark | comparison | median | min – max | rounds | goal | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(runs, 160)]
    for run in runs:
        lines += ["", f"## {run.name}", "", f"{run.what}. Status: **{run.status}** ({run.seconds:.0f} s)."]
        if run.command:
            lines += ["", f"`{' '.join(run.command)}`"]
        if run.status != "ok":
            lines += ["", "```", run.error[-2000:], "```"]
            continue
        arms = run.result.get("arms", {})
        if arms:
            lines += ["", f"| arm | metric | median ({run.result.get('unit', '')}) | rounds |", "|---|---|---|---|"]
            for arm, metrics in arms.items():
                for metric, values in metrics.items():
                    vals = [x for x in values if x is not None]
                    if vals:
                        lines.append(f"| {arm} | {metric} | {statistics.median(vals):.6g} | {len(vals)} |")
        for arm, err in run.result.get("failed", {}).items():
            lines.append(f"\nArm `{arm}` failed: {err}")
        for note in run.result.get("notes", []):
            lines += ["", f"- {note}"]
        if run.result.get("config"):
            lines += ["", "Configuration: `" + json.dumps(run.result["config"], sort_keys=True) + "`"]
        for png in plots.get(run.name, []):
            lines += ["", f"![{run.name}]({png})"]
    return "\n".join(lines) + "\n"


def plot(runs: list[BenchRun], folder: Path) -> dict[str, list[str]]:
    """Step-time distributions per arm and memory per rank, one PNG each; returns the file names per benchmark."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    made: dict[str, list[str]] = {}
    for run in runs:
        if run.status != "ok":
            continue
        raw = run.result.get("arms", {})
        metric = (
            "step_s" if any("step_s" in m for m in raw.values()) else next((k for m in raw.values() for k in m), None)
        )
        arms = {a: [x for x in m.get(metric, []) if x is not None] for a, m in raw.items()} if metric else {}
        arms = {a: v for a, v in arms.items() if v}
        if arms:
            fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(arms)), 3.2))
            ax.boxplot([[x * 1e3 for x in v] for v in arms.values()], tick_labels=list(arms))
            ax.set_ylabel(f"{metric} per round (ms)")
            ax.set_title(f"{run.name}: {metric} per arm")
            made.setdefault(run.name, []).append(_save(plt, fig, folder / f"{run.name}_step_times.png"))
        memory = run.result.get("memory", {})
        if memory:
            fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(memory)), 3.2))
            width = 0.8 / max(len(v) for v in memory.values())
            for rank in range(max(len(v) for v in memory.values())):
                xs = [i + rank * width for i in range(len(memory))]
                ax.bar(
                    xs, [v[rank] / 2**20 if rank < len(v) else 0 for v in memory.values()], width, label=f"rank {rank}"
                )
            ax.set_xticks(
                [i + width * (len(next(iter(memory.values()))) - 1) / 2 for i in range(len(memory))], list(memory)
            )
            ax.set_ylabel("MiB")
            ax.set_title(f"{run.name}: {run.result.get('memory_label') or 'model state per rank'}")
            ax.legend()
            made.setdefault(run.name, []).append(_save(plt, fig, folder / f"{run.name}_memory.png"))
        scaling = run.result.get("scaling", {}).get("samples_per_s", {})
        if any(scaling.values()):
            made.setdefault(run.name, []).append(_plot_scaling(plt, scaling, run.name, folder))
    return made


def _plot_scaling(plt: Any, samples_per_s: dict[str, dict[str, list[float]]], name: str, folder: Path) -> str:
    """Throughput (median over rounds) against the device count per strategy, each beside its linear ideal."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.set_xticks(sorted({int(n) for per_n in samples_per_s.values() for n, v in per_n.items() if v}))  # whole devices
    for strategy, per_n in samples_per_s.items():
        counts = sorted(int(n) for n, v in per_n.items() if v)
        if not counts:
            continue
        medians = [statistics.median(per_n[str(n)]) for n in counts]
        (line,) = ax.plot(counts, medians, marker="o", label=strategy)
        if counts[0] == 1:
            ax.plot(
                counts,
                [medians[0] * n for n in counts],
                linestyle=":",
                color=line.get_color(),
                label=f"{strategy}: linear",
            )
    ax.set_xlabel("devices")
    ax.set_ylabel("samples/s")
    ax.set_title(f"{name}: throughput by device count")
    ax.legend(fontsize="small")
    return _save(plt, fig, folder / f"{name}_scaling.png")


def _save(plt: Any, fig: Any, path: Path) -> str:
    """Write ``fig`` to ``path`` and close it; returns the file's name, as the report links it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def write(runs: list[BenchRun], machine: dict[str, Any], command: str, folder: Path, with_plots: bool = True) -> Path:
    """Write ``report.md``, ``results.json`` and (``with_plots``) the plots into ``folder``; returns the report's
    path."""
    folder.mkdir(parents=True, exist_ok=True)
    plots = plot(runs, folder) if with_plots else {}
    raw = {
        "machine": machine,
        "command": command,
        "benchmarks": [
            {
                "name": r.name,
                "what": r.what,
                "status": r.status,
                "seconds": r.seconds,
                "command": r.command,
                "error": r.error,
                "result": r.result,
                "summaries": [
                    s.as_dict() if isinstance(s, RatioSummary) else {"label": s[0], "error": s[1]}
                    for s in (r.summaries() if r.status == "ok" else [])
                ],
            }
            for r in runs
        ],
    }
    (folder / "results.json").write_text(json.dumps(raw, indent=1, default=str))
    report = folder / "report.md"
    report.write_text(markdown(runs, machine, command, plots))
    return report


def read(folder: Path) -> tuple[list[BenchRun], dict[str, Any], str]:
    """The runs, machine and command of the report that :func:`write` wrote into ``folder``.

    Raises:
        FileNotFoundError: ``folder`` holds no ``results.json``.
    """
    raw = json.loads((folder / "results.json").read_text())
    runs = [
        BenchRun(
            b["name"],
            b.get("what", ""),
            b["status"],
            b.get("seconds", 0.0),
            b.get("command", []),
            b.get("result", {}),
            b.get("error", ""),
        )
        for b in raw["benchmarks"]
    ]
    return runs, raw["machine"], raw["command"]


def terminal_table(runs: list[BenchRun]) -> str:
    """The final table printed on the terminal."""
    rows = [("benchmark", "comparison", "median", "min-max", "goal", "verdict")]
    rows += [(*row[:4], *row[5:]) for row in summary_rows(runs, 60, plain=True)]  # all but the rounds
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
