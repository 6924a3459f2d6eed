"""Rule ``epoch-end``: whether the outputs an epoch end got were per dataloader. 1.x passed ``dataloader_idx`` to
evaluation steps only; a ``training_step(..., dataloader_idx=None)`` (a template's shared signature, a real
held-out file's shape) never got one, so its epoch end got a flat list (the tool raised KeyError on it)."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer

SHARED = """import pytorch_lightning as pl
import torch
from torch import nn


class Shared(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.seen = {}

    def shared_step(self, batch):
        loss = self.layer(batch[0]).pow(2).mean()
        return {"loss": loss, "size": len(batch[0])}

    def training_step(self, batch, batch_idx, dataloader_idx=None):
        return self.shared_step(batch)

    def validation_step(self, batch, batch_idx, dataloader_idx=None):
        return self.shared_step(batch)

    def shared_epoch_end(self, outputs, stage):
        self.seen[stage] = [o["size"] for o in outputs]

    def training_epoch_end(self, outputs):
        return self.shared_epoch_end(outputs, "train")

    def validation_epoch_end(self, outputs):
        return self.shared_epoch_end(outputs, "val")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_a_training_step_with_a_dataloader_idx_parameter_collects_a_flat_list(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    result = upgrade_source(SHARED)
    out = result.source
    assert rules.TODO_TAG not in out, out
    again = upgrade_source(out)
    assert again.source == out and not again.changes
    assert "outputs, self.training_step_outputs = self.training_step_outputs, []" in out  # not per loader
    namespace: dict[str, object] = {}
    exec(compile(out, "shared", "exec"), namespace)  # noqa: S102
    model = namespace["Shared"]()
    loader = DataLoader(TensorDataset(torch.randn(10, 2)), batch_size=4)
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    # What 1.x handed each epoch end: one entry per step, in order (a single validation loader: a flat list too).
    assert model.seen == {"train": [4, 4, 2], "val": [4, 4, 2]}
