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


@pytest.mark.parametrize("value", ["None", "True"])
def test_automatic_optimization_none_or_true_is_dropped(value: str) -> None:
    """1.1/1.2 optimized automatically where the module's flag and the Trainer's were both set, the Trainer's None
    counting as True: None or True left the module's own setting in charge, which is all 2.x reads."""
    from tests.helpers.upgrade_check import upgraded_result

    result = upgraded_result(
        f"import pytorch_lightning as pl\nt = pl.Trainer(max_epochs=2, automatic_optimization={value})\n"
    )
    assert result.source.endswith("t = pl.Trainer(max_epochs=2)\n") and not result.todos
    assert [f.rule for f in result.findings] == ["trainer-automatic-optimization"]


def test_automatic_optimization_false_keeps_its_todo() -> None:
    """False turned the fitted module's optimization manual: which module that is, only the fit calls tell."""
    result = upgrade_source("import pytorch_lightning as pl\nt = pl.Trainer(automatic_optimization=False)\n")
    assert "TODO(lightning-mgpu:trainer-automatic-optimization)" in result.source
    assert "automatic_optimization=False" not in result.source.splitlines()[-1]
