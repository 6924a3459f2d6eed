"""SaveOnInterrupt + RNGStates in one process: a real SIGINT mid-epoch, then resume, equals a run never stopped.

The model has dropout, so without the RNG states the resumed run draws different masks (checked too: the test can
fail). Multi-process cases, through ``examples/train.py`` and a terminal-like SIGINT to the process group, are in
``tests/integration/reliability/test_interrupt.py``.
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
from lightning_mgpu.callbacks.save_on_interrupt import _no_broadcast
from lightning_mgpu.data.loader import resumable_loader
from tests.helpers.trainer import quiet_trainer


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
    trainer = quiet_trainer(max_epochs=3, callbacks=callbacks, default_root_dir=root)
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
    assert (
        saved["global_step"] == 18
        and saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["completed"] == 4
    )
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


class _SeesTheLoop(pl.Callback):
    """Records, at each batch, whether Lightning's per-step SIGTERM broadcast is the one SaveOnInterrupt put there."""

    def __init__(self) -> None:
        self.skipped: list[bool] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        loop = trainer.fit_loop.epoch_loop
        self.skipped.append(loop._broadcast_sigterm_tensor is _no_broadcast)


@pytest.mark.parametrize("signals", [(signal.SIGINT, signal.SIGTERM), (signal.SIGINT,)], ids=["sigterm", "sigint_only"])
def test_lightning_sigterm_broadcast_is_skipped_while_we_handle_sigterm(tmp_path: Path, signals) -> None:
    """Lightning broadcasts its SIGTERM flag before every step; our handler replaces Lightning's, so that is waste."""
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    from lightning_mgpu.utilities._compat import SIGTERM_BROADCAST_SINCE, lightning_at_least

    if not lightning_at_least(SIGTERM_BROADCAST_SINCE):
        pytest.skip(f"Lightning broadcasts its SIGTERM flag each step only from {SIGTERM_BROADCAST_SINCE}")
    assert hasattr(_TrainingEpochLoop, "_broadcast_sigterm_tensor"), "Lightning renamed its per-step broadcast"
    seen = _SeesTheLoop()
    trainer, _ = _fit(tmp_path, [SaveOnInterrupt(dirpath=tmp_path / "ckpt", signals=signals), seen])
    assert len(seen.skipped) == 39 and all(seen.skipped) is (signal.SIGTERM in signals)
    assert "_broadcast_sigterm_tensor" not in vars(trainer.fit_loop.epoch_loop)  # Lightning's own is back after fit


def test_a_sigterm_before_training_is_not_lost(tmp_path: Path) -> None:
    """A SIGTERM that Lightning's handler caught after the sanity check, before ours was installed, is ours to act
    on."""

    class SigtermDuringSetup(pl.Callback):
        def on_sanity_check_end(self, trainer, pl_module) -> None:
            assert trainer._signal_connector._original_handlers, "Lightning installs its SIGTERM handler later now"
            os.kill(os.getpid(), signal.SIGTERM)  # Lightning's handler is installed by now, ours not yet

    saver = SaveOnInterrupt(dirpath=tmp_path / "ckpt")
    # From Python's default, as in a fresh script: a handler left by an earlier test (ray.init's exits at once) would
    # run inside Lightning's and end the fit before ours is installed.
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(SystemExit):
            _fit(tmp_path, [SigtermDuringSetup(), saver])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert saver.saved_path is not None and torch.load(saver.saved_path, weights_only=False)["global_step"] == 1


@pytest.mark.parametrize("step", [12, 25], ids=["end_of_epoch_0", "end_of_epoch_1"])
def test_ctrl_c_at_an_epochs_last_batch_saves_at_its_end_and_resumes_exactly(tmp_path: Path, step: int) -> None:
    """Found by the Ctrl-C test under load: a Ctrl-C during an epoch's last batch. Saved right after that batch,
    Lightning resumed one epoch too far and the loader replayed epoch 0's order; the save now waits for the epoch's
    end (validation included), and the next epoch's order depends on its number alone."""
    _, reference = _fit(tmp_path / "ref", [RNGStates()])
    saver = SaveOnInterrupt(dirpath=tmp_path / "ckpt")
    with pytest.raises(SystemExit):
        _fit(tmp_path / "int", [saver, CtrlCAt(step), RNGStates()])
    saved = torch.load(saver.saved_path, weights_only=False)
    progress = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert saved["global_step"] == step + 1 and progress["completed"] == progress["ready"] == 13  # the epoch ended
    _, resumed = _fit(tmp_path / "res", [RNGStates()], ckpt_path=saver.saved_path)
    differ = [
        k for (k, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()) if not torch.equal(a, b)
    ]
    assert differ == []
