"""SaveOnInterrupt + RNGStates in one process: a real SIGINT mid-epoch, then resume, equals a run never stopped.

The model has dropout, so without the RNG states the resumed run draws different masks (checked too: the test can
fail). Multi-process cases, through ``examples/train.py`` and a terminal-like SIGINT to the process group, are in
``tests/reliability/test_interrupt.py``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from lightning_mgpu.callbacks import RNGStates, SaveOnInterrupt
from lightning_mgpu.data.loader import resumable_loader


class DropoutModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)

    def _data(self, n: int, seed: int) -> TensorDataset:
        x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
        return TensorDataset(x, (x[:, 0] > 0).long())

    def train_dataloader(self):
        return resumable_loader(self._data(100, 0), batch_size=8, shuffle=True, seed=1)

    def val_dataloader(self):
        return resumable_loader(self._data(24, 2), batch_size=8)


class CtrlCAt(pl.Callback):
    """Sends this process a real signal (SIGINT: Ctrl-C) when the given optimizer step starts."""

    def __init__(self, step: int, signum: signal.Signals = signal.SIGINT) -> None:
        self.step, self.signum = step, signum

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def _fit(root: Path, callbacks: list, ckpt_path: Path | None = None) -> tuple[pl.Trainer, DropoutModule]:
    pl.seed_everything(7, verbose=False)
    trainer = pl.Trainer(
        max_epochs=3, accelerator="cpu", devices=1, callbacks=callbacks, default_root_dir=root, logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    model = DropoutModule()
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer, model


@pytest.mark.parametrize("with_rng", [True, False], ids=["with_rng_states", "without"])
def test_interrupt_then_resume_equals_an_uninterrupted_run(tmp_path: Path, with_rng: bool) -> None:
    rng = [RNGStates()] if with_rng else []
    _, reference = _fit(tmp_path / "ref", [*rng])

    saver = SaveOnInterrupt(dirpath=tmp_path / "ckpt")
    with pytest.raises(SystemExit):  # Lightning's graceful shutdown after KeyboardInterrupt
        _fit(tmp_path / "int", [saver, CtrlCAt(17), *rng])
    assert saver.saved_path == tmp_path / "ckpt" / "last.ckpt"
    saved = torch.load(saver.saved_path, weights_only=False)
    assert saved["global_step"] == 18 and saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["completed"] == 4
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler given back

    _, resumed = _fit(tmp_path / "res", [*rng], ckpt_path=saver.saved_path)
    equal = all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), resumed.state_dict().values()))
    assert equal is with_rng  # dropout masks after the resume come from the restored RNG, and only from it


def test_sigterm_saves_and_stops_like_ctrl_c(tmp_path: Path) -> None:
    """horovodrun passes Ctrl-C on as SIGTERM, and SLURM pre-emption sends it: the same save, then the same stop."""
    _, reference = _fit(tmp_path / "ref", [RNGStates()])
    before = signal.getsignal(signal.SIGTERM)
    saver = SaveOnInterrupt(dirpath=tmp_path / "ckpt")
    with pytest.raises(SystemExit):
        _fit(tmp_path / "int", [saver, CtrlCAt(17, signal.SIGTERM), RNGStates()])
    assert saver.saved_path is not None and torch.load(saver.saved_path, weights_only=False)["global_step"] == 18
    assert signal.getsignal(signal.SIGTERM) == before  # Lightning's and ours both given back

    _, resumed = _fit(tmp_path / "res", [RNGStates()], ckpt_path=saver.saved_path)
    assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), resumed.state_dict().values()))


def test_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="check_every_n_steps must be >= 1"):
        SaveOnInterrupt(check_every_n_steps=0)
    with pytest.raises(ValueError, match="handles nothing"):
        SaveOnInterrupt(signals=())
