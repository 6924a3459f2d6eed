"""GradSyncToggle: one gradient all-reduce round per optimizer step, under every strategy.

The integration runs (``tests/integration/runners/run_callbacks.py``) train on 2 CPU processes with gloo and count
every gradient-reducing collective per backward pass (torch.distributed reductions, a counting DDP comm
hook, Horovod's allreduce). The same launches also carry the other three callbacks; their assertions live
in their own test modules and reuse the launches within a session.

The in-process tests; the ones that launch processes are in ``tests/integration/callbacks/test_grad_sync.py``.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import GradSyncToggle
from tests.helpers.trainer import quiet_trainer


def test_rejects_bad_accumulate() -> None:
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="accumulate_grad_batches"):
            GradSyncToggle(accumulate_grad_batches=bad)  # type: ignore[arg-type]


class _Tiny(pl.LightningModule):
    def __init__(self, manual: bool = False, step_every: int = 1) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.automatic_optimization = not manual
        self.step_every = step_every

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self.layer(batch[0]).pow(2).mean()
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        self.manual_backward(loss)
        if (batch_idx + 1) % self.step_every == 0:
            opt.step()
            opt.zero_grad()
        return None

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=2)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(**kwargs: Any) -> pl.Trainer:
    return quiet_trainer(max_epochs=1, **kwargs)


def test_conflicting_accumulation_in_automatic_optimization_is_an_error() -> None:
    trainer = _trainer(accumulate_grad_batches=2, callbacks=[GradSyncToggle(accumulate_grad_batches=4)])
    with pytest.raises(MisconfigurationException, match=r"conflicts with Trainer\(accumulate_grad_batches=2\)"):
        trainer.fit(_Tiny())


def test_stepping_inside_a_skipped_micro_batch_is_an_error() -> None:
    # The user steps every batch but told the callback to accumulate 4: the ranks would diverge silently.
    trainer = _trainer(callbacks=[GradSyncToggle(accumulate_grad_batches=4)])
    with pytest.raises(RuntimeError, match=r"skipped gradient synchronization for batch_idx=0"):
        trainer.fit(_Tiny(manual=True, step_every=1))


def test_counts_skipped_micro_batches() -> None:
    cb = GradSyncToggle(accumulate_grad_batches=4)
    _trainer(callbacks=[cb]).fit(_Tiny(manual=True, step_every=4))
    assert cb.skipped_micro_batches == 6  # 8 micro-batches, 2 of them final
    cb = GradSyncToggle()
    _trainer(callbacks=[cb], accumulate_grad_batches=4).fit(_Tiny())
    assert cb.skipped_micro_batches == 6


class _NoSyncWrapper(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.blocked = 0

    @contextmanager
    def no_sync(self) -> Any:
        self.blocked += 1
        yield


def test_resolves_how_to_skip_sync_per_strategy() -> None:
    cb = GradSyncToggle()
    assert cb._resolve_blocker(SingleDeviceStrategy(device=torch.device("cpu"))) is None

    # A parallel strategy that wraps the model in something with no_sync(): the callback installs it, so
    # Lightning's loop and toggle_model() use it too, and removes it again at teardown.
    strategy = DDPStrategy()
    strategy.model = _NoSyncWrapper(nn.Linear(2, 2))
    blocker = cb._resolve_blocker(strategy)
    with strategy.block_backward_sync():
        pass
    assert blocker is not None and strategy.model.blocked == 1
    cb.teardown(None, None, "fit")  # type: ignore[arg-type]
    assert "block_backward_sync" not in strategy.__dict__

    strategy = DDPStrategy()
    strategy.model = nn.Linear(2, 2)  # no DDP, no no_sync(), no override
    with pytest.raises(MisconfigurationException, match="cannot skip gradient synchronization under DDPStrategy"):
        cb._resolve_blocker(strategy)


class _SelfAccumulatingStrategy(DDPStrategy):
    """Like DeepSpeed: accumulates gradients itself, and neither overrides block_backward_sync nor wraps in DDP."""

    @property
    def handles_gradient_accumulation(self) -> bool:
        return True


@pytest.mark.parametrize("manual", [False, True], ids=["automatic", "manual"])
def test_strategy_that_accumulates_itself_is_left_alone(manual: bool, caplog: pytest.LogCaptureFixture) -> None:
    strategy = _SelfAccumulatingStrategy()
    strategy.model = nn.Linear(2, 2)  # no no_sync(): resolving a blocker would raise
    trainer = SimpleNamespace(strategy=strategy, accumulate_grad_batches=1 if manual else 4)
    module = SimpleNamespace(automatic_optimization=not manual)
    cb = GradSyncToggle(accumulate_grad_batches=4 if manual else None)
    with caplog.at_level(logging.INFO):
        cb.on_fit_start(trainer, module)  # type: ignore[arg-type]
    assert "_SelfAccumulatingStrategy accumulates gradients itself; nothing to do." in caplog.text
    cb.on_train_batch_start(trainer, module, None, 0)  # type: ignore[arg-type]
    assert cb.skipped_micro_batches == 0 and cb._unsynced is None  # nothing blocked, nothing counted
    assert "block_backward_sync" not in strategy.__dict__


def test_bundle_strategies_implement_block_backward_sync() -> None:
    """The design contract: every bundle strategy overrides ParallelStrategy.block_backward_sync()."""
    from lightning.pytorch.strategies import ParallelStrategy

    from lightning_mgpu.strategies import (
        DataParallelStrategy,
        HorovodStrategy,
        ShardedStrategy,
    )

    for cls in (DataParallelStrategy, HorovodStrategy, ShardedStrategy):
        assert cls.block_backward_sync is not ParallelStrategy.block_backward_sync, cls
