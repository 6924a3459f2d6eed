"""Rule ``epoch-end``: a 1.x epoch end whose body only hands its outputs to ``super().<hook>(outputs)`` in a direct
LightningModule subclass. 1.x's LightningModule epoch ends did nothing; 2.x's LightningModule has none, so the call
raises AttributeError. The method goes, and the step collects nothing for it."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

FORWARDER = """import pytorch_lightning as pl
import torch
from torch import nn


class Forwarder(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def training_epoch_end(self, outputs):
        # hand over to Lightning
        super().training_epoch_end(outputs)
        # self.log("never", 1.0)

    def validation_epoch_end(self, step_outputs):
        \"\"\"Nothing of its own.\"\"\"
        return super().validation_epoch_end(step_outputs)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_an_epoch_end_that_only_calls_lightning_modules_goes(tmp_path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(FORWARDER)
    assert rules.TODO_TAG not in out
    assert "epoch_end" not in out and "step_outputs" not in out  # nothing left, nothing collected
    namespace: dict[str, object] = {}
    exec(compile(out, "forwarder", "exec"), namespace)  # noqa: S102
    import torch

    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, default_root_dir=tmp_path)
    trainer.fit(namespace["Forwarder"](), loader, loader)  # 2.x: super().training_epoch_end raised AttributeError
    assert trainer.global_step == 2


@pytest.mark.parametrize(
    "source",
    [
        # A base of the file's own (its epoch end may do something), another mixin base, more than the super call.
        FORWARDER.replace("class Forwarder(pl.LightningModule):", "class Forwarder(Base):"),
        FORWARDER.replace("class Forwarder(pl.LightningModule):", "class Forwarder(pl.LightningModule, Mixin):"),
        FORWARDER.replace("        # hand over to Lightning\n", "        print(len(outputs))\n"),
    ],
)
def test_an_epoch_end_that_may_do_more_is_not_removed(source: str) -> None:
    out = upgrade_source(source).source
    assert "training_epoch_end" in out or "on_train_epoch_end" in out
