"""``TrackGradNorm``: 1.x's ``track_grad_norm=p`` as a callback: 1.9's norms (rounded floats, one per parameter and
the total), for the first optimizer, after the backward and before clipping, logged on step and epoch or by the
module's own ``log_grad_norm``."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import TrackGradNorm
from lightning_mgpu.callbacks.track_grad_norm import legacy_grad_norms
from tests.helpers.trainer import quiet_trainer


def norms_1_9(module: nn.Module, p: float, sep: str = "/") -> dict[str, float]:
    """1.9.5's ``pytorch_lightning.utilities.grads.grad_norm``, written out from its source."""
    norms = {f"grad_{p}_norm{sep}{n}": w.grad.data.norm(p) for n, w in module.named_parameters() if w.grad is not None}
    if norms:
        norms[f"grad_{p}_norm_total"] = torch.tensor(list(norms.values())).norm(p)
    return {k: round(v.item(), 4) for k, v in norms.items()}


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 3)
        self.second = nn.Linear(3, 1)
        self.seen: list[dict[str, float]] = []  # the norms 1.9 would have logged, before each step

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.second(self.first(batch[0])).pow(2).mean()

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.seen.append(norms_1_9(self, 2.0))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)


@pytest.mark.parametrize("p", [1, 2.0, "inf"])
def test_the_norms_are_1_9s(p: Any) -> None:
    net = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    net(torch.randn(5, 4)).sum().backward()
    net[1].bias.grad = None  # a parameter without a gradient is left out, as in 1.9
    assert legacy_grad_norms(net, p) == norms_1_9(net, float(p))
    assert legacy_grad_norms(net, p, group_separator=".") == norms_1_9(net, float(p), ".")


def test_each_step_logs_the_norms_on_step_and_their_epoch_mean() -> None:
    torch.manual_seed(0)
    model = Model()
    trainer = quiet_trainer(max_epochs=1, callbacks=[TrackGradNorm(2)], log_every_n_steps=1)
    trainer.fit(model)
    assert len(model.seen) == 4
    logged = trainer.logged_metrics
    for key, value in model.seen[-1].items():
        assert logged[f"{key}_step"].item() == pytest.approx(value)  # the last step's, as 1.9 logged it
        epoch_mean = sum(seen[key] for seen in model.seen) / len(model.seen)
        assert logged[f"{key}_epoch"].item() == pytest.approx(epoch_mean, rel=1e-5)
    assert "grad_2.0_norm/first.weight_step" in logged and "grad_2.0_norm_total_epoch" in logged
    assert not any(key.startswith("grad_") for key in trainer.progress_bar_metrics)  # 1.6-1.9: prog_bar=False


def test_a_module_s_own_log_grad_norm_decides_how_they_are_logged() -> None:
    class OwnLogging(Model):
        def log_grad_norm(self, grad_norm_dict: dict[str, float]) -> None:
            self.log("total_norm", grad_norm_dict["grad_2.0_norm_total"], on_step=True, on_epoch=False)

    trainer = quiet_trainer(max_epochs=1, callbacks=[TrackGradNorm(2)])
    model = OwnLogging()
    trainer.fit(model)
    assert trainer.logged_metrics["total_norm"].item() == pytest.approx(model.seen[-1]["grad_2.0_norm_total"])
    assert not any(key.startswith("grad_") for key in trainer.logged_metrics)


def test_minus_one_logs_nothing_and_other_values_are_refused_as_1x_did() -> None:
    trainer = quiet_trainer(max_epochs=1, callbacks=[TrackGradNorm(-1)])
    trainer.fit(Model())
    assert not any(key.startswith("grad_") for key in trainer.logged_metrics)
    with pytest.raises(ValueError, match="should be an int, a float or 'inf'"):
        TrackGradNorm("two")


def test_only_the_first_optimizer_is_tracked() -> None:
    """1.x tracked optimizer_idx 0 only: under manual optimization the second optimizer's steps log nothing."""

    class TwoOptimizers(Model):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.calls: list[int] = []

        def training_step(self, batch: Any, batch_idx: int) -> None:
            first, second = self.optimizers()
            for opt in (first, second):
                loss = self.second(self.first(batch[0])).pow(2).mean()
                self.manual_backward(loss)
                opt.step()
                opt.zero_grad()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.first.parameters(), lr=0.1), torch.optim.SGD(self.second.parameters(), lr=0.1)

    seen: list[str] = []

    class Spy(TrackGradNorm):
        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            before = len(trainer.callback_metrics)
            super().on_before_optimizer_step(trainer, pl_module, optimizer)
            seen.append("first" if optimizer is trainer.optimizers[0] else "second")
            assert optimizer is trainer.optimizers[0] or len(trainer.callback_metrics) == before

    model = TwoOptimizers()
    trainer = quiet_trainer(max_steps=2, callbacks=[Spy(2)])
    trainer.fit(model)
    assert seen.count("first") == seen.count("second") > 0
    assert "grad_2.0_norm/first.weight_step" in trainer.logged_metrics
