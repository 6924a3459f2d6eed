"""benchmarks.harness.interleave, quiet_trainer and timed_fit: the rotation every benchmark's rounds follow, and the
Trainer and clocked fit of every Lightning arm."""

from __future__ import annotations

import os

import pytest
import torch

from benchmarks import harness
from benchmarks.harness.trainer import quiet_trainer


def test_interleave_rotates_the_order_and_pairs_results_by_round(capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []

    def arm(name: str):  # type: ignore[no-untyped-def]
        return lambda: calls.append(name) or f"{name}{len(calls)}"

    out = harness.interleave(
        {"a": arm("a"), "b": arm("b"), "c": arm("c")}, rounds=4, describe=lambda r: ",".join(sorted(r))
    )
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


def test_timed_fit_runs_warmup_plus_steps_plus_one_and_restores_the_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.harness.models import Trainable, mlp, random_data
    from benchmarks.harness.stats import median_interval
    from benchmarks.harness.trainer import timed_fit

    # An external launch of one rank whose WORLD_SIZE a previous fit's teardown removed.
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    seen: list[int] = []
    from lightning.pytorch.callbacks import LambdaCallback

    count = LambdaCallback(on_train_batch_end=lambda trainer, *_: seen.append(trainer.global_step))
    loader = torch.utils.data.DataLoader(random_data(64, 8, classes=2), batch_size=4)
    clock = timed_fit(Trainable(mlp(8, 2)), loader, warmup=2, steps=3, callbacks=[count], accelerator="cpu", devices=1)
    assert seen == [1, 2, 3, 4, 5, 6]  # 2 + 3 + 1 steps, the caller's callbacks after the clock
    assert len(clock.marks) == len(clock.ends) == len(clock.cpu_marks) == len(clock.cpu_ends) == 6
    assert median_interval(clock.marks, 2, 3) > 0 and all(b >= a for a, b in zip(clock.cpu_marks, clock.cpu_ends))
    assert os.environ["WORLD_SIZE"] == "1"
