"""GradSyncToggle: one gradient all-reduce round per optimizer step, under every strategy.

The integration runs (``tests/integration/runners/run_callbacks.py``) train on 2 CPU processes with gloo and count
every gradient-reducing collective per backward pass (torch.distributed reductions, a counting DDP comm
hook, Horovod's allreduce). The same launches also carry the other three callbacks; their assertions live
in their own test modules and reuse the launches within a session.

The tests that launch processes; the in-process ones are in ``tests/unit/callbacks/test_grad_sync.py``.
"""

from __future__ import annotations

import pytest

from lightning_mgpu.testing.parity import max_abs_diff
from tests.integration.runners.run_callbacks import launch, matrix_params


@pytest.mark.parametrize(("strategy", "mode", "precision"), matrix_params())
def test_one_allreduce_round_per_optimizer_step(strategy: str, mode: str, precision: str) -> None:
    run = launch(strategy, mode, precision, devices=1 if strategy == "dp" else 2)
    finals = run.final_micro_batches()
    phases = 2 if mode == "gan" else 1  # the GAN runs a generator and a discriminator backward per micro-batch
    for report in run.ranks:
        assert report["steps"] == [b for b in finals for _ in range(phases)], report["steps"]
        assert report["backward_passes"] == 8 * phases
        synced = sorted({backward for _, backward in report["collectives"]})
        if strategy == "dp":
            assert synced == [], "dp runs one process: nothing to synchronize"
            continue
        # Exactly the backward passes of the final micro-batches reduced gradients: one round per step.
        assert len(synced) == len(report["steps"]), (synced, report["steps"])
        assert synced == [b * phases + p for b in finals for p in range(phases)], report["collectives"]
        assert {batch for batch, _ in report["collectives"]} == set(finals)

    reference = run.reference()
    for params in run.params:
        assert max_abs_diff(params, run.params[0]) == 0.0, "ranks disagree"
        # fp32: equal to synchronizing every micro-batch; bf16-mixed: as close as bf16 matmuls allow.
        assert max_abs_diff(params, reference) < (1e-5 if precision == "32-true" else 2e-2)
