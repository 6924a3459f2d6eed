"""``TerminateOnNaN``: 1.x's ``terminate_on_nan=True`` as a callback: a non-finite training loss stops the fit before
its backward, a non-finite parameter after it, with 1.x's messages; manual optimization is left alone, as in 1.x."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import TerminateOnNaN
from tests.helpers.trainer import quiet_trainer


class Model(pl.LightningModule):
    def __init__(self, nan_loss_at: int = -1, manual: bool = False) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.nan_loss_at = nan_loss_at
        self.automatic_optimization = not manual
        self.seen: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.seen.append(batch_idx)
        loss = self.net(batch[0]).pow(2).mean()
        if batch_idx == self.nan_loss_at:
            loss = loss * float("nan")
        if not self.automatic_optimization:
            self.manual_backward(loss)
            self.optimizers().step()
            self.optimizers().zero_grad()
            return None
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4)


def test_a_nan_loss_stops_the_fit_before_its_backward() -> None:
    model = Model(nan_loss_at=3)
    trainer = quiet_trainer(max_epochs=1, callbacks=[TerminateOnNaN()])
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"^The loss returned in `training_step` is nan\.$"):  # 1.x's words
        trainer.fit(model)
    assert model.seen == [0, 1, 2, 3] and trainer.global_step == 3  # batch 3 never stepped
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the first 3 batches stepped


def test_a_non_finite_weight_after_a_backward_stops_the_fit() -> None:
    class BadGradient(Model):
        def on_before_backward(self, loss: torch.Tensor) -> None:  # after the callback's loss check
            if self.trainer.global_step == 2:
                with torch.no_grad():
                    self.net.weight[0, 0] = float("nan")

    model = BadGradient()
    with pytest.raises(ValueError, match=r"^Detected nan and/or inf values in `net.weight`"):
        quiet_trainer(max_epochs=1, callbacks=[TerminateOnNaN()]).fit(model)
    assert model.seen == [0, 1, 2]


def test_without_it_or_under_manual_optimization_the_fit_goes_on() -> None:
    model = Model(nan_loss_at=3)
    quiet_trainer(max_epochs=1).fit(model)
    assert model.seen == list(range(8)) and not torch.isfinite(model.net.weight).all()  # what 2.x does by itself
    manual = Model(nan_loss_at=3, manual=True)
    quiet_trainer(max_epochs=1, callbacks=[TerminateOnNaN()]).fit(manual)  # 1.x checked automatic optimization only
    assert manual.seen == list(range(8))
