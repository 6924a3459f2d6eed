"""bench_sharded_checkpoint's arms per accelerator (its runs:
tests/integration/benchmarks/test_bench_sharded_checkpoint.py)."""

from __future__ import annotations

import pytest

from benchmarks import bench_sharded_checkpoint as bench


def test_each_accelerator_gets_its_arms_by_default() -> None:
    assert bench.parse_args([]).arms == list(bench.ARMS) and "lightning_fsdp" not in bench.ARMS
    assert bench.parse_args(["--accelerator", "gpu"]).arms == ["sharded_fsdp2_trainer", "lightning_fsdp"]


def test_lightning_fsdp_on_the_cpu_is_refused_naming_why(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--arms", "sharded,lightning_fsdp"])
    assert (
        "lightning_fsdp runs on GPUs only (--accelerator gpu): torch 2.13's FSDP1 refuses the CPU"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        bench.parse_args(["--accelerator", "gpu", "--arms", "raw_dcp"])
    assert "the others measure CPU ranks" in capsys.readouterr().err
