"""Rules ``epoch-end`` and ``step-end`` together, on a base class meant to be subclassed: its evaluation step is a
placeholder (``raise NotImplementedError``) or hands over to another step, each stage has a step end that does more
than reduce, and the epoch ends read what 1.x handed them, the step ends' results. The step ends run under
``LegacyStepEnds`` (on the steps of subclasses in other files too) and the epoch ends' outputs are collected by
``on_validation_batch_end``/``on_test_batch_end``, which 2.x calls with what the loop got: the step end's result."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

GRADER = """from abc import ABC

import pytorch_lightning as pl
import torch


class GraderBase(pl.LightningModule, ABC):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.report = {}

    def validation_step(self, batch, batch_idx, *args, **kwargs):
        \"\"\"Written by each grader.\"\"\"
        raise NotImplementedError

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self.validation_step(batch, batch_idx)

    def test_step(self, batch, batch_idx, *args, **kwargs):
        return self.predict_step(batch, batch_idx)

    def validation_step_end(self, step_out, *args, **kwargs):
        step_out["graded"] = step_out["score"] > 0
        return step_out

    def test_step_end(self, step_out, *args, **kwargs):
        return {"final": step_out["score"].clamp(min=0).sum()}

    def validation_epoch_end(self, outputs):
        self.report["val"] = [int(o["graded"].sum()) for o in outputs]

    def test_epoch_end(self, outputs):
        self.report["test"] = [float(o["final"]) for o in outputs]
"""


def _loader(batches: int = 3):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(7)
    return DataLoader(TensorDataset(torch.randn(batches * 4, 3, generator=generator)), batch_size=4)


def test_the_epoch_ends_get_the_step_ends_results(tmp_path) -> None:
    import torch

    out = upgraded(GRADER, no_todo=True, no_unmarked=True)
    assert "class GraderBase(pl.LightningModule, ABC, LegacyStepEnds):" in out
    assert "def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):" in out
    assert "def on_test_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):" in out
    assert "step_outputs" not in out  # nothing collected in the steps themselves
    namespace: dict[str, object] = {}
    exec(compile(out, "grader", "exec"), namespace)  # noqa: S102

    class Grader(namespace["GraderBase"]):  # type: ignore[misc,valid-type]  # a subclass in another file
        def validation_step(self, batch, batch_idx, *args, **kwargs):
            return {"score": self.layer(batch[0]).squeeze(-1)}

    model = Grader()
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, default_root_dir=tmp_path)
    trainer.validate(model, _loader(), verbose=False)
    trainer.test(model, _loader(), verbose=False)
    with torch.no_grad():
        scores = [model.layer(x).squeeze(-1) for (x,) in _loader()]
    # 1.x: validation_epoch_end got validation_step_end's dicts; test_epoch_end got test_step_end's, test_step's
    # handover to validation_step getting no validation step end (only the outermost step's end runs).
    assert model.report["val"] == [int((s > 0).sum()) for s in scores]
    assert model.report["test"] == pytest.approx([float(s.clamp(min=0).sum()) for s in scores])
    # predict_step hands over to validation_step too: 1.x's predict loop called no step end.
    predictions = trainer.predict(model, _loader())
    assert all(set(p) == {"score"} for p in predictions)


def test_a_subclass_in_the_file_keeps_the_todos() -> None:
    # Its steps would collect for the epoch ends the file shows: not the batch-end collection.
    source = GRADER + (
        "\n\nclass Grader(GraderBase):\n"
        "    def validation_step(self, batch, batch_idx, *args, **kwargs):\n"
        "        return {'score': self.layer(batch[0]).squeeze(-1)}\n"
    )
    out = upgraded(source)
    assert "TODO(lightning-mgpu:step-end)" in out


def test_a_reduce_only_step_end_kept_beside_the_mixin_feeds_the_epoch_end(tmp_path) -> None:
    # A sum over the step's vector, kept because the class gets LegacyStepEnds: 1.x's test_epoch_end got the sums.
    source = GRADER.replace('{"final": step_out["score"].clamp(min=0).sum()}', '{"final": step_out["score"].sum()}')
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert "def _test_step_end_1x(self, step_out, *args, **kwargs):" in out
    assert "def on_test_batch_end(" in out and "test_step_outputs" not in out
    namespace: dict[str, object] = {}
    exec(compile(out, "grader", "exec"), namespace)  # noqa: S102

    class Grader(namespace["GraderBase"]):  # type: ignore[misc,valid-type]
        def validation_step(self, batch, batch_idx, *args, **kwargs):
            return {"score": self.layer(batch[0]).squeeze(-1)}

    model = Grader()
    quiet_trainer("pytorch_lightning", default_root_dir=tmp_path).test(model, _loader(), verbose=False)
    import torch

    with torch.no_grad():
        expected = [float(model.layer(x).squeeze(-1).sum()) for (x,) in _loader()]
    assert model.report["test"] == pytest.approx(expected)
