"""Trainer arguments 2.x dropped that changed nothing a run computes: removed with a NOTE, not a TODO."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.transform import upgrade_source


def test_log_gpu_memory_is_dropped_with_a_note() -> None:
    """log_gpu_memory changed nothing a run computes: it goes with a NOTE naming the 2.x monitors, not a TODO."""
    result = upgrade_source('t = Trainer(gpus=1, log_gpu_memory="all")\n')
    assert result.source.endswith('t = Trainer(accelerator="gpu", devices=1)\n') and not result.todos
    assert "NOTE(lightning-mgpu:trainer-log-gpu-memory): log_gpu_memory dropped" in result.source
    assert upgrade_source(result.source).source == result.source
