"""Rule ``renamed-hook``: ``on_epoch_start``/``on_epoch_end`` in a class that already has the 2.x hooks they become
(the lightning-hydra-template's ``on_epoch_end`` resetting metrics beside ``training_epoch_end``, which becomes
``on_train_epoch_end``). 1.x ran ``on_epoch_start`` before each loop's own epoch-start hook and ``on_epoch_end`` after
each loop's own epoch-end hook, in training, validation and test: the converted module does the same, in that order."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

TEMPLATE = """import pytorch_lightning as pl
import torch
from torch import nn


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.events = []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def training_epoch_end(self, outputs):
        # outputs: what training_step returned
        pass

    def validation_step(self, batch, batch_idx):
        return {"size": len(batch[0])}

    def validation_epoch_end(self, outputs):
        self.events.append(("validation_epoch_end", len(outputs)))

    def test_step(self, batch, batch_idx):
        return None

    def on_validation_epoch_start(self):
        \"\"\"Its own start.\"\"\"
        self.events.append("on_validation_epoch_start")

    def on_epoch_start(self):
        self.events.append("on_epoch_start")

    def on_epoch_end(self):
        # reset metrics at the end of every epoch
        self.events.append("on_epoch_end")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_loop_epoch_hooks_run_where_1x_ran_them(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(TEMPLATE)
    assert rules.TODO_TAG not in out, out
    assert "    def on_train_epoch_end(self):\n        # outputs: what training_step returned\n" in out
    assert "on_test_epoch_end = _on_epoch_end_1x" in out and "on_train_epoch_start = _on_epoch_start_1x" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "template", "exec"), namespace)  # noqa: S102
    model = namespace["Classifier"]()
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    # 1.x's order: the training epoch starts; its validation runs before the training epoch's own end.
    assert model.events == [
        "on_epoch_start",
        "on_epoch_start",
        "on_validation_epoch_start",
        ("validation_epoch_end", 2),
        "on_epoch_end",
        "on_epoch_end",
    ]
    model.events.clear()
    trainer.test(model, loader, verbose=False)
    assert model.events == ["on_epoch_start", "on_epoch_end"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("        pass\n", "        if outputs:\n            return\n"), "an end hook that can return early"),
        # (a direct LightningModule's super().on_epoch_end() did nothing: test_super_removed_hook.py)
        (('self.events.append("on_epoch_end")', "super().on_epoch_end()"), "the old hook calls a mixin's"),
    ],
)
def test_what_cannot_be_merged_exactly_stays_a_todo(change: tuple[str, str], why: str) -> None:
    source = TEMPLATE.replace("(pl.LightningModule):", "(pl.LightningModule, Mixin):")
    out = upgraded(source.replace(*change))
    assert "TODO(lightning-mgpu:hook-conflict): on_epoch_end became on_train_epoch_end" in out, why
    assert "def on_epoch_end(self):" in out
