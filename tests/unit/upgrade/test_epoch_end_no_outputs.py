"""Rule ``epoch-end``: a 1.x epoch end written without its ``outputs`` parameter (``def training_epoch_end(self):``).
1.x (1.4 to 1.9) called an overridden epoch end with the outputs list, so ``(self)`` alone raised TypeError and no 1.x
run reached its body: it becomes the 2.x hook, its body unchanged, nothing collected."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

SYNCER = """import pytorch_lightning as pl
import torch
from torch import nn


class TargetSyncer(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.online = nn.Linear(2, 1)
        self.target = nn.Linear(2, 1)
        self.syncs = 0
        self.checks = 0

    def training_step(self, batch, batch_idx):
        return (self.online(batch[0]) - self.target(batch[0]).detach()).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        return self.online(batch[0]).sum()

    def training_epoch_end(self):

        self.target.load_state_dict(self.online.state_dict())
        self.syncs += 1

    def validation_epoch_end(self):
        self.checks += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_an_epoch_end_without_outputs_becomes_the_2x_hook(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    result = upgrade_source(SYNCER)
    out = upgraded(SYNCER)
    assert rules.TODO_TAG not in out
    assert "def on_train_epoch_end(self):" in out and "def on_validation_epoch_end(self):" in out
    assert "step_outputs" not in out  # nothing collected: the body reads no outputs
    assert {f.rule for f in result.findings if not f.todo} == {"epoch-end"}
    namespace: dict[str, object] = {}
    exec(compile(out, "syncer", "exec"), namespace)  # noqa: S102
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=2, num_sanity_val_steps=0, default_root_dir=tmp_path)
    model = namespace["TargetSyncer"]()
    trainer.fit(model, loader, loader)
    assert model.syncs == 2 and model.checks == 2  # once per epoch each
    assert torch.equal(model.target.weight, model.online.weight)  # the body ran after the epoch's last step


@pytest.mark.parametrize(
    "signature",
    ["(self, *args)", "(self, **kwargs)", "(self, *, outputs=None)"],
)
def test_other_signatures_keep_the_todo(signature: str) -> None:
    out = upgrade_source(SYNCER.replace("def validation_epoch_end(self):", f"def validation_epoch_end{signature}:"))
    assert "TODO(lightning-mgpu:epoch-end)" in out.source


def test_a_static_epoch_end_keeps_the_todo() -> None:
    source = SYNCER.replace(
        "    def validation_epoch_end(self):\n        self.checks += 1\n",
        "    @staticmethod\n    def validation_epoch_end(self):\n        pass\n",
    )
    assert "TODO(lightning-mgpu:epoch-end)" in upgrade_source(source).source
