"""AutoMixedPrecision: resolving ``precision="auto"``, conflicts, loss-scale monitoring, the shard-aware check.

Lightning turns ``Trainer(accelerator="cpu", precision="16-mixed")`` into ``bf16-mixed``, but a hand-built
``MixedPrecision("16-mixed", "cpu")`` plugin runs real float16 autocast with ``torch.amp.GradScaler("cpu")``,
so loss scaling and skipped steps are tested through Lightning on CPU.

The tests that launch processes; the in-process ones are in ``tests/unit/callbacks/test_mixed_precision.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.runners.run_callbacks import launch, matrix_params


def _bf16_params() -> list[Any]:
    return [p for p in matrix_params() if p.values[2] == "bf16-mixed"]


@pytest.mark.parametrize(("strategy", "mode", "precision"), _bf16_params())
def test_bf16_mixed_on_cpu_under_every_strategy(strategy: str, mode: str, precision: str) -> None:
    run = launch(strategy, mode, precision, devices=1 if strategy == "dp" else 2)
    for report in run.ranks:
        assert report["precision"] == "bf16-mixed"
        assert report["dtypes"] == ["torch.bfloat16"], "autocast was not active in training_step"
        # The callback resolved bf16-mixed (as for `--precision auto` on a bf16 CPU) and its setup check found
        # the strategy running it: a mismatch raises. It monitors only a loss scaler: bf16 has float32's range
        # and must get none on any strategy, so it counts no steps and logs no amp/* keys (a stray scaler
        # would make it log amp/loss_scale).
        amp = report["amp"]
        assert amp["resolved"] == "bf16-mixed", amp
        assert amp["plugin"].endswith("MixedPrecision") and amp["scaler"] is None, amp
        assert (amp["optimizer_steps"], amp["skipped_steps"]) == (0, 0), amp
        assert not [k for k in report["logged"] if k.startswith("amp/")], report["logged"]
