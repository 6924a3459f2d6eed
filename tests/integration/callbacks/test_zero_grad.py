"""ZeroGradSetToNone: every ``.grad`` is ``None`` after each optimizer step, even when user code zero-fills.

The tests that launch processes; the in-process ones are in ``tests/unit/callbacks/test_zero_grad.py``.
"""

from __future__ import annotations

import pytest

from tests.integration.runners.run_callbacks import launch, matrix_params


@pytest.mark.parametrize(("strategy", "mode", "precision"), matrix_params())
def test_gradients_are_none_after_each_step_under_every_strategy(strategy: str, mode: str, precision: str) -> None:
    """The shared launches: zero-filling ``optimizer_zero_grad`` (auto) / ``zero_grad(set_to_none=False)`` (manual)."""
    run = launch(strategy, mode, precision, devices=1 if strategy == "dp" else 2)
    steps_per_window = 2 if mode == "gan" else 1
    for report in run.ranks:
        windows = len(run.final_micro_batches())
        assert report["grads_none_at_batch_end"] == [True] * windows
        if mode != "auto":
            assert report["grads_none_after_step"] == [True] * (windows * steps_per_window)
        param_bytes = sum(v.numel() * 4 for v in run.params[0].values())
        if strategy.startswith("sharded"):
            # ShardedDataParallel reduces each gradient to the rank whose optimizer shard owns the parameter and
            # drops it elsewhere, so at a step this rank holds (and the callback frees) exactly its own shard's
            # gradients; with find_unused_parameters (gan) the gradients it zero-fills are part of that shard.
            owned = report["owned_param_bytes"]
            assert 0 < owned < param_bytes, (owned, param_bytes)
            assert report["released_bytes"] == windows * owned
        else:
            assert report["released_bytes"] == windows * param_bytes
        if mode == "auto":
            assert "grad_memory_released_mb" in report["logged"]
    if strategy.startswith("sharded"):
        # The shards partition the parameters: together the ranks own (and free) every gradient once.
        assert sum(r["owned_param_bytes"] for r in run.ranks) == param_bytes
