"""Rule ``hook-param``: 1.x's ``lr_scheduler_step(self, scheduler, optimizer_idx, metric)`` -> 2.x's
``(self, scheduler, metric)``. A body that uses ``optimizer_idx`` computes it as 1.x's loop did (the index of the
scheduler's optimizer among those configure_optimizers returned, matched with ``scheduler.optimizer``), and a
``super().lr_scheduler_step(...)`` call loses it."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

STEPPER = """import pytorch_lightning as pl
import torch
from torch import nn


class Stepper(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=1.0)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)]

    def lr_scheduler_step(self, sched, optimizer_idx, metric):
        \"\"\"Records which optimizer's scheduler stepped.\"\"\"
        self.seen.append(optimizer_idx)
        super().lr_scheduler_step(sched, optimizer_idx, metric)
"""


def _converted():
    out = upgraded(STEPPER)
    namespace: dict[str, object] = {}
    exec(compile(out, "stepper", "exec"), namespace)  # noqa: S102
    return out, namespace["Stepper"]()


def test_optimizer_idx_in_use_is_computed_from_the_schedulers_optimizer() -> None:
    out, _ = _converted()
    assert rules.TODO_TAG not in out
    assert (
        "    def lr_scheduler_step(self, sched, metric):\n"
        '        """Records which optimizer\'s scheduler stepped."""\n'
        "        optimizer_idx = self.trainer.optimizers.index(sched.optimizer)\n"
        "        self.seen.append(optimizer_idx)\n"
        "        super().lr_scheduler_step(sched, metric)\n" in out
    )


def test_the_converted_hook_steps_under_a_2x_trainer(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    _, model = _converted()
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=2, default_root_dir=tmp_path)
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    assert model.seen == [0, 0]  # one optimizer: index 0, once an epoch
    assert trainer.optimizers[0].param_groups[0]["lr"] == 0.25  # the base hook still stepped it


def test_the_index_is_the_position_of_the_schedulers_optimizer() -> None:
    import torch

    _, model = _converted()
    first = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    second = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    model._trainer = types.SimpleNamespace(optimizers=[first, second])
    model.lr_scheduler_step(torch.optim.lr_scheduler.StepLR(second, 1), None)
    model.lr_scheduler_step(torch.optim.lr_scheduler.StepLR(first, 1), None)
    assert model.seen == [1, 0]


def test_another_signature_keeps_the_optimizer_idx_todo() -> None:
    source = STEPPER.replace("(self, sched, optimizer_idx, metric)", "(self, sched, optimizer_idx, metric=None, *a)")
    assert rules.todo_text("optimizer-idx", hook="lr_scheduler_step") in upgrade_source(source).source
