"""Rule ``epoch-end``: a base's epoch end that reads its outputs converts even where a subclass's step hands it
nothing, as 1.x ran them: a step that only raises (``NotImplementedError``: no output ever came of it), or a step
whose class overrides the epoch end with one that reads nothing (no reading hook ran on its instances). Such a step
collects nothing, and the base's step collects for the base's hook; a subclass below it that reads keeps the TODO
where its step returns nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

SOURCE = """import pytorch_lightning as pl
import torch


class Detector(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(2, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        return self.head(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        return batch_idx, len(batch[0])

    def validation_epoch_end(self, steps):
        self.seen.append(("val", [index for index, _ in steps]))

    def test_step(self, batch, batch_idx):
        return batch_idx

    def test_epoch_end(self, steps):
        self.seen.append(("test", list(steps)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Aligner(Detector):
    def validation_step(self, batch, batch_idx):
        self.head(batch[0])  # a metric updated here; nothing returned

    def validation_epoch_end(self, steps):
        self.seen.append("aligned")

    def test_step(self, batch, batch_idx):
        raise NotImplementedError("not evaluated on the test set")
"""


def run(out: str, name: str, tmp_path, test: bool = True) -> list[object]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict[str, object] = {}
    exec(compile(out, "detector", "exec"), namespace)  # noqa: S102
    model = namespace[name]()
    loader = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2)
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    if test:
        trainer.test(model, loader, verbose=False)
    return model.seen


def test_the_base_collects_and_the_subclass_hands_nothing(tmp_path) -> None:
    out = upgraded(SOURCE, no_todo=True, no_unmarked=True)
    assert out.count("_step_outputs.append(") == 2  # the base's two steps; the subclass's collect nothing
    assert 'raise NotImplementedError("not evaluated on the test set")' in out
    # What 1.x handed each epoch end: the base's hooks got every step's output, the subclass's read none.
    assert run(out, "Detector", tmp_path) == [("val", [0, 1, 2]), ("test", [0, 1, 2])]
    assert run(out, "Aligner", tmp_path / "a", test=False) == ["aligned"]


def test_a_reading_hook_below_the_quiet_step_keeps_the_todo() -> None:
    # A subclass of Aligner reads the outputs of Aligner's step, which returns nothing: not a shape to collect.
    source = SOURCE + (
        "\n\nclass Reader(Aligner):\n    def validation_epoch_end(self, steps):\n        self.seen.append(len(steps))\n"
    )
    out = upgraded(source)
    assert rules.todo_text("epoch-end", hook="validation_epoch_end", new="on_validation_epoch_end") in out
