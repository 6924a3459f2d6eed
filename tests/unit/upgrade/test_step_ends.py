"""Rule ``step-end``: 1.x's ``*_step_end`` hooks that do more than reduce, kept as ``_<step>_end_1x`` and run after
each step as 1.x ran them (:mod:`lightning_mgpu.upgrade.step_ends`' ``LegacyStepEnds``, or the step returning the
hook's result where the step collects its outputs for a converted epoch end). The converted modules run here under a
real Lightning 2.x Trainer on CPU, in-process, also under the bundle's ``dp`` strategy."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.step_ends import LegacyStepEnds, step_end_1x
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

# A step end that reduces per-sample losses and records (train), one that only logs and returns nothing (val), and
# a test step that hands over to validation_step, whose own step end 1.x did not call there.
SCORER = """import pytorch_lightning as pl
import torch
from torch import nn


class Scorer(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.ends = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return {"loss": (self.layer(x).squeeze(-1) - y) ** 2, "step": batch_idx}

    def training_step_end(self, outputs):
        loss = outputs["loss"].mean()
        self.log("train_loss", loss)
        self.ends.append(("train", outputs["step"]))
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return {"err": (self.layer(x).squeeze(-1) - y).abs()}

    def validation_step_end(self, outputs):
        self.log("val_err", outputs["err"].mean())
        self.ends.append(("val", len(outputs["err"])))

    def test_step(self, batch, batch_idx):
        return self.validation_step(batch, batch_idx)

    def test_step_end(self, outputs):
        self.ends.append(("test", len(outputs["err"])))
        return outputs["err"].max()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""

# The step's outputs are collected for a converted epoch end: what the list holds must be the step end's result.
RANKER = """import pytorch_lightning as pl
import torch
from torch import nn


class Ranker(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.epoch_scores = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return {"err": (self.layer(x).squeeze(-1) - y).abs()}

    def validation_step_end(self, outputs):
        return {"err": outputs["err"].mean(), "n": len(outputs["err"])}

    def validation_epoch_end(self, outputs):
        self.epoch_scores.append([(float(o["err"]), o["n"]) for o in outputs])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def _loader(batches: int = 2, size: int = 4):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batches * size, 3, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(dim=1)), batch_size=size)


def _module(source: str, name: str):
    namespace: dict[str, object] = {}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102
    return namespace[name]()


def _trainer(tmp_path, **kwargs):
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    return quiet_trainer("pytorch_lightning", max_epochs=1, num_sanity_val_steps=0, default_root_dir=tmp_path, **kwargs)


def test_a_step_end_that_does_more_than_reduce_runs_after_each_step() -> None:
    out = upgraded(SCORER)
    assert rules.TODO_TAG not in out
    assert "from lightning_mgpu.upgrade.step_ends import LegacyStepEnds" in out
    assert "class Scorer(pl.LightningModule, LegacyStepEnds):" in out
    for hook in rules.STEP_END_HOOKS:
        assert f"def _{hook}_1x(self, outputs):" in out and f"def {hook}(" not in out
    assert "return (self.layer(x).squeeze(-1) - y) ** 2" not in out  # the step itself unchanged
    assert '"step": batch_idx}\n' in out


@pytest.mark.parametrize("strategy", ["auto", "dp"])
def test_the_converted_step_ends_run_as_1x_ran_them(strategy: str, tmp_path) -> None:
    """Under a 2.x Trainer: the training step end's mean is the loss (2.x's backward refuses the per-sample vector the
    step returns), once per step; the validation step end logs; test_step's handover to validation_step gets the
    test step end only. Under the bundle's dp, combine_replica_outputs applies them (once, not again after the step).
    """
    import torch

    torch.manual_seed(0)
    model = _module(upgraded(SCORER), "Scorer")
    torch.manual_seed(0)
    reference = torch.nn.Linear(3, 1)
    trainer = _trainer(tmp_path, strategy=strategy)
    assert (type(trainer.strategy).__name__ == "DataParallelStrategy") == (strategy == "dp")
    trainer.fit(model, _loader(), _loader(batches=1))
    assert model.ends == [("train", 0), ("train", 1), ("val", 4)]
    assert "train_loss" in trainer.callback_metrics and "val_err" in trainer.callback_metrics
    # The parameters after two SGD steps on the mean of the per-sample losses, as 1.x's loss was.
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in _loader():
        optimizer.zero_grad()
        ((reference(x).squeeze(-1) - y) ** 2).mean().backward()
        optimizer.step()
    assert torch.allclose(model.layer.weight, reference.weight) and torch.allclose(model.layer.bias, reference.bias)
    model.ends.clear()
    trainer.test(model, _loader(batches=1), verbose=False)
    assert model.ends == [("test", 4)]


def test_a_step_called_outside_a_trainer_gets_no_step_end() -> None:
    import torch

    model = _module(upgraded(SCORER), "Scorer")
    out = model.training_step((torch.zeros(2, 3), torch.zeros(2)), 0)
    assert out["loss"].shape == (2,) and model.ends == []  # 1.x's loop, not the step, called the hook


def test_a_step_end_returning_none_keeps_the_step_output() -> None:
    class Module(LegacyStepEnds):
        def _validation_step_end_1x(self, outputs):
            return None if outputs == "kept" else outputs + "!"

    assert step_end_1x(Module(), "validation_step", "kept") == "kept"
    assert step_end_1x(Module(), "validation_step", "new") == "new!"
    assert step_end_1x(Module(), "test_step", "none") == "none"  # no step end: the output as it was
    # dp/ddp2: the replicas' gathered outputs, the same fallback (1.9: the gathered outputs as they are).
    assert Module().combine_replica_outputs("validation_step", "kept") == "kept"
    assert Module().combine_replica_outputs("predict_step", "p") == "p"


def test_the_epoch_end_collects_what_the_step_end_returned(tmp_path) -> None:
    out = upgraded(RANKER)
    assert rules.TODO_TAG not in out
    assert "step_output = self._validation_step_end_1x(" in out
    assert "self.validation_step_outputs.append(step_output)" in out
    assert "LegacyStepEnds" not in out  # the step returns it: no mixin to run it again
    model = _module(out, "Ranker")
    _trainer(tmp_path).validate(model, _loader(batches=2), verbose=False)
    assert [n for _, n in model.epoch_scores[0]] == [4, 4]  # 1.x's outputs list held the step end's dicts
    import torch

    with torch.no_grad():
        expected = [float((model.layer(x).squeeze(-1) - y).abs().mean()) for x, y in _loader(batches=2)]
    assert [e for e, _ in model.epoch_scores[0]] == pytest.approx(expected)


@pytest.mark.parametrize("strategy", ["auto", "dp"])
def test_a_collected_step_end_where_the_file_runs_dp_feeds_the_epoch_end_from_the_batch_end(
    strategy: str, tmp_path
) -> None:
    """Under dp 1.x passed the hook the replicas' gathered outputs, so the step cannot return it (it would see each
    replica's chunk): LegacyStepEnds applies it (combine_replica_outputs under dp) and on_validation_batch_end
    collects what the loop got, the step end's result, for the epoch end."""
    out = upgraded(RANKER + '\ntrainer = pl.Trainer(gpus=2, accelerator="dp")\n', no_todo=True)
    assert "class Ranker(pl.LightningModule, LegacyStepEnds):" in out
    assert "def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):" in out
    assert "validation_step_outputs" not in out
    model = _module(out.split("\ntrainer = ")[0], "Ranker")
    _trainer(tmp_path, strategy=strategy).validate(model, _loader(batches=2), verbose=False)
    assert [n for _, n in model.epoch_scores[0]] == [4, 4]  # the step end's dicts, one per batch
    import torch

    with torch.no_grad():
        expected = [float((model.layer(x).squeeze(-1) - y).abs().mean()) for x, y in _loader(batches=2)]
    assert [e for e, _ in model.epoch_scores[0]] == pytest.approx(expected)


def test_a_collected_step_end_keeps_its_todo_where_neither_way_is_exact() -> None:
    """dp in the file (the step cannot return the hook's result) and a class with on_validation_batch_end already
    (the batch end cannot collect): the TODO stays."""
    source = RANKER.replace(
        "    def configure_optimizers",
        "    def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):\n"
        "        pass\n\n    def configure_optimizers",
    )
    out = upgraded(source + '\ntrainer = pl.Trainer(gpus=2, accelerator="dp")\n')
    assert rules.todo_text("step-end", hook="validation_step_end") in out
    assert "def validation_step_end(self, outputs):" in out


@pytest.mark.parametrize(("size", "keys"), [(4, ["err"]), (5, ["err", "n"])])
def test_a_collected_step_end_that_may_return_none_feeds_the_epoch_end_from_the_batch_end(
    size: int, keys: list[str], tmp_path
) -> None:
    """A step end that may return None (1.x then kept the step's own output) cannot be returned by the step: under
    LegacyStepEnds the loop gets 1.x's value, and on_validation_batch_end collects it for the epoch end."""
    source = RANKER.replace(
        '        return {"err": outputs["err"].mean(), "n": len(outputs["err"])}\n',
        '        if len(outputs["err"]) > 4:\n            return {"err": outputs["err"].mean(), "n": 2}\n',
    ).replace('[(float(o["err"]), o["n"]) for o in outputs]', "[sorted(o) for o in outputs]")
    out = upgraded(source, no_todo=True)
    assert "def on_validation_batch_end(" in out and "LegacyStepEnds):" in out
    model = _module(out, "Ranker")
    _trainer(tmp_path).validate(model, _loader(batches=2, size=size), verbose=False)
    assert model.epoch_scores[0] == [keys, keys]


def test_a_subclass_of_a_converted_base_gets_the_step_end_on_its_own_step(tmp_path) -> None:
    """A base class's step end applied in 1.x to its subclasses' steps (written in other files too)."""
    source = SCORER + (
        "\n\nclass Child(Scorer):\n"
        "    def validation_step(self, batch, batch_idx):\n"
        "        out = super().validation_step(batch, batch_idx)\n"
        "        return {'err': out['err'] * 0}\n"
    )
    out = upgraded(source)
    assert "class Child(Scorer):" in out and rules.TODO_TAG not in out
    model = _module(out, "Child")
    trainer = _trainer(tmp_path)
    trainer.validate(model, _loader(batches=1), verbose=False)
    assert model.ends == [("val", 4)]  # once, after the outermost step
    assert float(trainer.callback_metrics["val_err"]) == 0.0


# A step end that records into the module and returns nothing, beside an epoch end that reads the step's own outputs
# (a reserve file of the third held-out draw): 1.x kept the step's output where the step end gave None.
TALLIER = """import pytorch_lightning as pl
import torch
from torch import nn


class Tallier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.seen = []
        self.epochs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        err = (self.layer(x).squeeze(-1) - y).abs()
        return {"val_loss": err.mean(), "n": len(err)}

    def validation_step_end(self, step_output):
        self.seen.append(step_output["n"])

    def validation_epoch_end(self, outputs):
        self.epochs.append((float(torch.stack([o["val_loss"] for o in outputs]).mean()), list(self.seen)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_a_collected_step_end_that_never_returns_a_value_is_called_by_the_step(tmp_path) -> None:
    """The step calls the kept hook and returns (and collects) its own output, as 1.x's loop kept it; the epoch end
    sees both the step's outputs and what the hook recorded (before, a step-end TODO)."""
    out = upgraded(TALLIER)
    assert rules.TODO_TAG not in out
    assert (
        "        self._validation_step_end_1x(step_output)\n"
        "        self.validation_step_outputs.append(step_output)\n"
        "        return step_output\n"
    ) in out
    model = _module(out, "Tallier")
    _trainer(tmp_path).validate(model, _loader(batches=2), verbose=False)
    import torch

    with torch.no_grad():
        expected = sum(float((model.layer(x).squeeze(-1) - y).abs().mean()) for x, y in _loader(batches=2)) / 2
    assert model.epochs == [(pytest.approx(expected), [4, 4])]
