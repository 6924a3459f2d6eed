"""benchmarks.harness.interleave and quiet_trainer: the rotation every benchmark's rounds follow, and the Trainer of
every Lightning arm."""

from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks.harness.trainer import quiet_trainer


def test_interleave_rotates_the_order_and_pairs_results_by_round(capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []

    def arm(name: str):  # type: ignore[no-untyped-def]
        return lambda: calls.append(name) or f"{name}{len(calls)}"

    out = harness.interleave({"a": arm("a"), "b": arm("b"), "c": arm("c")}, rounds=4, describe=lambda r: ",".join(sorted(r)))
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]  # every arm in every position
    assert list(out) == ["a", "b", "c"] and out["a"] == ["a1", "a6", "a8", "a10"]  # results in round order, per arm
    assert capsys.readouterr().out.splitlines() == [f"round {i}/4: a,b,c" for i in range(1, 5)]


def test_interleave_reports_nothing_on_the_other_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    assert harness.interleave({"x": lambda: 1.0}, rounds=2, report=False) == {"x": [1.0, 1.0]}
    assert capsys.readouterr().out == ""


def test_quiet_trainer_runs_only_the_fit_and_its_arguments_win() -> None:
    trainer = quiet_trainer(accelerator="cpu", devices=1, max_steps=1, enable_model_summary=True)
    assert trainer.logger is None and trainer.checkpoint_callback is None and not trainer.progress_bar_callback
    assert trainer.limit_val_batches == 0 and trainer.num_sanity_val_steps == 0
    assert any(type(c).__name__ == "ModelSummary" for c in trainer.callbacks)  # the caller's setting beat QUIET's
