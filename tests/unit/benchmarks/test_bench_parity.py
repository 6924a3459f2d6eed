"""bench_parity's comparison of saved parameters, on fixed tensors. (The suite's full and quick runs launch it for
real.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks import bench_parity


def test_max_abs_diff_is_the_worst_element_over_every_parameter() -> None:
    a = {"w": torch.zeros(3), "b": torch.tensor([1.0])}
    b = {"w": torch.tensor([0.0, -2e-7, 1e-8]), "b": torch.tensor([1.0])}
    assert bench_parity.max_abs_diff(a, b) == pytest.approx(2e-7)
    assert bench_parity.max_abs_diff(a, a) == 0.0
    with pytest.raises(RuntimeError, match=r"parameter names differ: \['b', 'extra'\]"):
        bench_parity.max_abs_diff(a, {"w": torch.zeros(3), "extra": torch.zeros(1)})


def test_load_params_reads_every_rank_in_order_and_refuses_an_empty_run(tmp_path: Path) -> None:
    for rank in (1, 0):
        torch.save({"w": torch.full((2,), float(rank))}, tmp_path / f"params_rank{rank}.pt")
    assert [p["w"][0].item() for p in bench_parity.load_params(tmp_path)] == [0.0, 1.0]
    with pytest.raises(RuntimeError, match="no parameters written"):
        bench_parity.load_params(tmp_path / "nothing")
