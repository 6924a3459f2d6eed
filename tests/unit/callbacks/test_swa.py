"""``LegacyStochasticWeightAveraging``: 1.x's ``swa_lrs=None``, the optimizer's learning rates when averaging starts
(after a schedule moved them), which is Lightning's own callback given those rates."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import StochasticWeightAveraging
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import LegacyStochasticWeightAveraging
from tests.helpers.trainer import quiet_trainer


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(4, 1)
        self.lrs: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.net(batch[0]).pow(2).mean()

    def on_train_epoch_end(self) -> None:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.2)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(32, 4, generator=torch.Generator().manual_seed(1))), batch_size=8)


def _fit(callback: pl.Callback) -> Model:
    model = Model()
    quiet_trainer(max_epochs=5, callbacks=[callback]).fit(model)
    return model


def test_the_rates_when_averaging_starts_as_1x_read_them() -> None:
    legacy = _fit(LegacyStochasticWeightAveraging(swa_epoch_start=3))
    # Lightning's callback given the rate the schedule reached by epoch 3 (0.2 halved at epochs 2): the same run.
    given = _fit(StochasticWeightAveraging(swa_lrs=0.1, swa_epoch_start=3))
    assert legacy.lrs == given.lrs and legacy.lrs[3:] == [pytest.approx(0.1)] * 2
    assert all(torch.equal(a, b) for a, b in zip(legacy.parameters(), given.parameters()))
    # The placeholder rate never reaches the optimizer, and the initial one is not what 1.x used.
    initial = _fit(StochasticWeightAveraging(swa_lrs=0.2, swa_epoch_start=3))
    assert not all(torch.equal(a, b) for a, b in zip(legacy.parameters(), initial.parameters()))


def test_given_rates_are_lightnings_own() -> None:
    legacy = _fit(LegacyStochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=3))
    given = _fit(StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=3))
    assert all(torch.equal(a, b) for a, b in zip(legacy.parameters(), given.parameters()))
