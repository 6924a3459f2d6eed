"""ActivationCheckpointing: selection, exact gradients, memory, checkpoints, Lightning's setup order, strategies.

The tests that launch processes; the in-process ones are in ``tests/unit/callbacks/test_activation_checkpointing.py``.
"""

from __future__ import annotations

import pytest

from tests.integration.runners.run_callbacks import launch, matrix_params


@pytest.mark.parametrize(("strategy", "mode", "precision"), matrix_params())
def test_checkpointing_under_every_strategy(strategy: str, mode: str, precision: str) -> None:
    """Blocks built in configure_model (and a GAN's generator), checkpointed under each strategy.

    The same runs' parameters match the reference without checkpointing (tests/integration/callbacks/test_grad_sync.py).
    """
    run = launch(strategy, mode, precision, devices=1 if strategy == "dp" else 2)
    for report in run.ranks:
        if mode == "gan":
            assert report["checkpointed"] == ["gen"]
            continue
        assert report["checkpointed"] == ["blocks.0", "blocks.1", "blocks.2"]
        # Each block ran forward twice per backward pass: once in forward, once recomputed in backward.
        assert report["forward_calls"] == {f"b{i}": 2 * report["backward_passes"] for i in range(3)}
