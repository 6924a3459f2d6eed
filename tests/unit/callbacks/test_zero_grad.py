"""ZeroGradSetToNone: every ``.grad`` is ``None`` after each optimizer step, even when user code zero-fills.

The in-process tests; the ones that launch processes are in ``tests/integration/callbacks/test_zero_grad.py``.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import ZeroGradSetToNone
from tests.helpers.trainer import quiet_trainer


class _ZeroFilling(pl.LightningModule):
    """Zero-fills gradients (a common override); optionally manual optimization or an overflowing loss."""

    def __init__(self, manual: bool = False, accumulate: int = 1, overflow_at: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.automatic_optimization = not manual
        self.accumulate, self.overflow_at = accumulate, overflow_at
        self.grads_after_step: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self.net(batch[0]).pow(2).mean()
        if batch_idx in self.overflow_at:
            loss = loss * float("inf")
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        self.manual_backward(loss)
        if (batch_idx + 1) % self.accumulate == 0:
            opt.step()
            self.grads_after_step.append(all(p.grad is None for p in self.parameters()))
            opt.zero_grad(set_to_none=False)
        return None

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=2)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _GradState(pl.Callback):
    """Records, at the end of each batch, whether it stepped and whether every gradient is None."""

    def __init__(self) -> None:
        self.stepped, self.records = False, []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self.stepped = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.records.append((self.stepped, all(p.grad is None for p in pl_module.parameters())))
        self.stepped = False


def _fit(model: pl.LightningModule, callbacks: list[pl.Callback], **kwargs: Any) -> pl.Trainer:
    trainer = quiet_trainer(max_epochs=1, callbacks=callbacks, **kwargs)
    trainer.fit(model)
    return trainer


def _param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_zero_filling_override_leaves_gradients_without_the_callback() -> None:
    """The problem the callback solves (and proof that the check below can fail)."""
    state = _GradState()
    _fit(_ZeroFilling(), [state], accumulate_grad_batches=2)
    assert any(stepped and not none for stepped, none in state.records)


def test_gradients_are_none_after_every_step_despite_zero_filling_override() -> None:
    state, cb = _GradState(), ZeroGradSetToNone()
    model = _ZeroFilling()
    trainer = _fit(model, [cb, state], accumulate_grad_batches=2)
    assert [stepped for stepped, _ in state.records] == [False, True] * 4
    for stepped, none in state.records:
        # Cleared after each step, and never in the middle of an accumulation window.
        assert none == stepped
    assert cb.released_bytes_total == 4 * _param_bytes(model)
    assert trainer.logged_metrics["grad_memory_released_mb"] == pytest.approx(_param_bytes(model) / 2**20)


def test_logs_only_on_the_batches_lightning_hands_to_the_loggers() -> None:
    batches: list[int] = []

    class Counting(_ZeroFilling):
        def log(self, name: str, *args: Any, **kwargs: Any) -> None:
            if name == "grad_memory_released_mb":
                batches.append(self.trainer.global_step)
            super().log(name, *args, **kwargs)

    model = Counting()
    trainer = _fit(model, [ZeroGradSetToNone()], accumulate_grad_batches=2, log_every_n_steps=3)
    # Four batches step (global steps 1-4 after them); Lightning logs after the third, and the epoch's last is added.
    assert batches == [3, 4]
    assert trainer.logged_metrics["grad_memory_released_mb"] == pytest.approx(_param_bytes(model) / 2**20)


def test_manual_optimization() -> None:
    model = _ZeroFilling(manual=True, accumulate=2)
    _fit(model, [ZeroGradSetToNone()])
    assert model.grads_after_step == [True] * 4


def test_step_skipped_by_the_grad_scaler_still_frees_gradients() -> None:
    # 16-mixed on CPU with a real torch.amp.GradScaler("cpu"); an inf loss makes the scaler skip step().
    state = _GradState()
    model = _ZeroFilling(overflow_at=(1,))
    _fit(model, [ZeroGradSetToNone(), state], plugins=[MixedPrecision("16-mixed", "cpu")], accumulate_grad_batches=2)
    assert state.records[1] == (True, True)


def test_hooks_are_removed_after_fit() -> None:
    model, cb = _ZeroFilling(), ZeroGradSetToNone()
    trainer = _fit(model, [cb])
    optimizer = trainer.optimizers[0]
    model.net(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    assert all(p.grad is not None for p in model.parameters())
