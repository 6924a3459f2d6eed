"""The report of the two-ranks-on-one-GPU tests: ``shared_gpu.jsonl`` -> ``shared_gpu.md`` beside it.

``tests/integration/strategies/test_shared_gpu.py`` appends one row per strategy to ``$LIGHTNING_MGPU_REPORT_DIR/
shared_gpu.jsonl`` (``benchmarks/gpu_check.sh`` sets the folder). This writes the table a reader wants: parity per
precision, exact resume, and memory per rank against ``ddp``. Every figure comes from ranks that share one GPU: context
for correctness and memory, never for speed or scaling.

    python -m benchmarks.shared_gpu_report benchmarks/results/2026-11-26_1xH100_shared
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")


def _mib(n: float) -> str:
    return f"{n / 2**20:.3f}"


def render(rows: list[dict[str, Any]]) -> str:
    """The markdown report of ``rows`` (one per strategy, the last row of a strategy wins)."""
    by_case = {row["case"]: row for row in rows}
    device = next(iter(by_case.values()))["device"] if by_case else "?"
    lines = [
        f"# Two ranks on one GPU ({device}), gloo between them",
        "",
        "From `tests/integration/strategies/test_shared_gpu.py` (`benchmarks/gpu_check.sh`). **Both ranks share one"
        " GPU:**",
        "these figures check correctness and memory per rank; they say nothing about speed or scaling.",
        "",
        "## Parity: max |param - reference| after 6 SGD steps (ranks bitwise equal to each other in every case)",
        "",
        "Reference: one process on the global batch, fp32 on the CPU; 16-mixed and bf16-mixed on the same GPU; the"
        " resume",
        "against the same save and resume in one process on the CPU.",
        "",
        "| strategy | 32-true (≤ 1e-5) | 16-mixed (≤ 1e-3) | bf16-mixed (≤ 5e-3) | saved at 3, resumed to 6 (≤ 1e-5) |",
        "|---|---|---|---|---|",
    ]
    for case, row in by_case.items():
        if row.get("memory_only"):  # a peer measured for memory alone (Lightning's FSDP)
            continue
        diffs = " | ".join(f"{row[f'max_abs_diff_{p}']:.2e}" for p in PRECISIONS)
        lines.append(f"| `{case}` | {diffs} | {row['max_abs_diff_resumed']:.2e} |")
    ddp = by_case.get("ddp")
    lines += [
        "",
        "## Memory per rank (3 Adam steps): model and optimizer state held, and the CUDA peak of the fit",
        "",
        "| strategy | params MiB (rank 0, 1) | optimizer state MiB (rank 0, 1) | state / ddp's | CUDA peak MiB (rank"
        " 0, 1) |",
        "|---|---|---|---|---|",
    ]
    for case, row in by_case.items():
        mem = row.get("memory_adam")
        if mem is None:  # ddp_spawn: the state lived in the spawned workers
            lines.append(f"| `{case}` | n/a | n/a | n/a | n/a |")
            continue
        held = [m["param_bytes"] + m["optimizer_bytes"] for m in mem]
        ratio = ""
        if ddp is not None:
            ddp_held = max(m["param_bytes"] + m["optimizer_bytes"] for m in ddp["memory_adam"])
            ratio = f"{max(held) / ddp_held:.3f}"
        peaks = ", ".join(_mib(m.get("cuda_peak_allocated_bytes", 0)) for m in mem)
        lines.append(
            f"| `{case}` | {', '.join(_mib(m['param_bytes']) for m in mem)} |"
            f" {', '.join(_mib(m['optimizer_bytes']) for m in mem)} | {ratio} | {peaks} |"
        )
    scaler = [case for case, row in by_case.items() if row.get("sharded_scaler_in_checkpoint")]
    if scaler:
        lines += [
            "",
            "16-mixed: the gradient scaler's state (ShardedGradScaler under FairScale, GradScaler under torch's"
            " ZeRO) is in the checkpoint under"
            f" {', '.join(f'`{c}`' for c in scaler)}.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    folder = Path((argv or sys.argv[1:])[0])
    rows = [json.loads(line) for line in (folder / "shared_gpu.jsonl").read_text().splitlines() if line.strip()]
    (folder / "shared_gpu.md").write_text(render(rows))


if __name__ == "__main__":
    main()
