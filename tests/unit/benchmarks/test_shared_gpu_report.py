"""benchmarks/shared_gpu_report.py: the table of the two-ranks-on-one-GPU tests, from fixed rows."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import shared_gpu_report


def _row(case: str, param_bytes: list[int], optimizer_bytes: list[int], resumed: float = 1e-7) -> dict:
    memory = [
        {"param_bytes": p, "optimizer_bytes": o, "cuda_peak_allocated_bytes": 3 * 2**20}
        for p, o in zip(param_bytes, optimizer_bytes)
    ]
    return {
        "case": case,
        "device": "NVIDIA H100 80GB HBM3",
        "max_abs_diff_resumed": resumed,
        "memory_adam": memory,
        "max_abs_diff_32-true": 2e-7,
        "max_abs_diff_16-mixed": 3e-4,
        "max_abs_diff_bf16-mixed": 1e-3,
    }


def test_report_gives_parity_resume_and_state_against_ddp(tmp_path: Path) -> None:
    rows = [_row("ddp", [400, 400], [800, 800]), _row("sharded_fsdp2", [200, 200], [400, 400], resumed=0.5)]
    rows[1]["sharded_scaler_in_checkpoint"] = False
    (tmp_path / "shared_gpu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    shared_gpu_report.main([str(tmp_path)])
    text = (tmp_path / "shared_gpu.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "share one GPU" in text
    assert "| `ddp` | 2.00e-07 | 3.00e-04 | 1.00e-03 | 1.00e-07 |" in text
    assert (
        "| `sharded_fsdp2` | 2.00e-07 | 3.00e-04 | 1.00e-03 | 5.00e-01 |" in text
    )  # a failed resume is shown, not hidden
    assert "| 0.500 | 3.000, 3.000 |" in text and "| 1.000 |" in text  # state held per rank / ddp's
    assert "ShardedGradScaler" not in text  # no case carried the scaler's state
