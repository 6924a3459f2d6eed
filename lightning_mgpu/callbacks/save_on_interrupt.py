"""Ctrl-C saves the interrupted step, then stops every rank; resuming from that checkpoint is exact.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group, so every rank gets it, each at a different
point of its step: one inside a backward all-reduce, another already waiting for the next batch. Saving from the
signal (Lightning's ``OnExceptionCheckpoint``) would start a checkpoint's collectives while other ranks are inside
the step's, and can hang or write a torn state. Here the signal only sets a flag; at the next optimizer-step boundary
the ranks agree (one all-reduce), save together as ``ModelCheckpoint`` would, and stop through Lightning's
KeyboardInterrupt shutdown. A second Ctrl-C stops at once, without saving.

SIGTERM is handled the same way: launchers pass a Ctrl-C on to their workers as SIGTERM (horovodrun, with 5 s before
SIGKILL), and SLURM pre-emption and ``scancel`` send it too. Lightning's own SIGTERM handling stops without saving.

Lightning (2.5.2+) also broadcasts its SIGTERM flag from rank 0 before every training step: one blocking collective per
step (0.5 ms here on gloo, and a host-device sync per step under NCCL; Lightning issue 21487). While this callback
handles SIGTERM, Lightning's flag can no longer be set, so that broadcast is skipped: this callback's own agreement
replaces it rather than adding a second collective to every step.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_mgpu.utilities.child_observer import stop_child_observer
from lightning_mgpu.utilities.process_group import in_spawned_worker

_SAME_CTRL_C_S = 1.0  # signals closer than this are one Ctrl-C
_LIGHTNING_SIGTERM_BROADCAST = "_broadcast_sigterm_tensor"  # _TrainingEpochLoop's per-step broadcast (Lightning 2.5.2+)


def _any_rank(trainer: pl.Trainer, flag: bool) -> bool:
    """Whether ``flag`` is set on any rank: one all-reduce.

    Lightning's ``reduce_boolean_decision`` under DDP runs a barrier before its all-reduce: two collectives per step
    where one does. Strategies whose ranks are not the default torch.distributed group (horovod) use their own.
    """
    import torch
    import torch.distributed as dist

    if (
        trainer.world_size > 1
        and dist.is_available()
        and dist.is_initialized()
        and dist.get_world_size() == trainer.world_size
    ):
        votes = torch.tensor([int(flag)], dtype=torch.int32, device=trainer.strategy.root_device)
        dist.all_reduce(votes, op=dist.ReduceOp.MAX)
        return bool(votes.item())
    return trainer.strategy.reduce_boolean_decision(flag, all=False)


def _last_batch_of_epoch(trainer: pl.Trainer) -> bool:
    """Whether the batch that just ended was its epoch's last (the loader ran out, or a limit was reached)."""
    progress = trainer.fit_loop.epoch_loop.batch_progress
    total = trainer.num_training_batches
    return bool(progress.is_last_batch) or (total != float("inf") and progress.current.ready >= total)


def _no_broadcast() -> None:
    """Stands in for Lightning's per-step SIGTERM broadcast while :class:`SaveOnInterrupt` handles SIGTERM."""


class SaveOnInterrupt(Callback):
    """On Ctrl-C (SIGINT) or SIGTERM, finish the current optimizer step on every rank, save a checkpoint, then stop.

    The checkpoint is a complete mid-epoch one: with a stateful training loader
    (:func:`lightning_mgpu.data.loader.resumable_loader`) and :class:`RNGStates`, ``fit(ckpt_path=...)`` from it ends
    with the same parameters as a run that was never interrupted. With gradient accumulation the stop waits for the
    step that completes the accumulation (partial gradients are not checkpointed).

    Args:
        dirpath: folder of the checkpoint; default: the ``ModelCheckpoint``'s folder, else
            ``default_root_dir/checkpoints``.
        filename: its name. The default, ``last.ckpt``, is what ``ModelCheckpoint(save_last=True)`` and
            ``train.py --resume auto`` resume from.
        check_every_n_steps: how often the ranks agree on whether one of them was interrupted (one all-reduce of one
            element). Raise it if a step is shorter than a few milliseconds.
        signals: the signals that ask for a save and a stop. A step must end within the launcher's grace period:
            torchrun waits 30 s before SIGKILL, horovodrun 5 s, SLURM ``KillWait`` (30 s by default).

    Raises:
        ValueError: ``check_every_n_steps`` < 1, or no signals.

    Example::

        trainer = Trainer(strategy="ddp", devices=2, callbacks=[SaveOnInterrupt(), RNGStates()])
        trainer.fit(model, dm)  # Ctrl-C: "Interrupted at step 37; saved checkpoints/last.ckpt"
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str = "last.ckpt",
        check_every_n_steps: int = 1,
        signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
    ) -> None:
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be >= 1, got {check_every_n_steps}.")
        if not signals:
            raise ValueError("SaveOnInterrupt(signals=()) handles nothing; leave the callback out instead.")
        self.signals = tuple(signal.Signals(s) for s in signals)
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.filename = filename
        self.check_every_n_steps = check_every_n_steps
        self.saved_path: Path | None = None
        self._signalled: float | None = None  # when the first signal came
        self._previous: dict[signal.Signals, Any] = {}
        self._quieted_loop: Any = None  # the epoch loop whose SIGTERM broadcast is skipped while we handle SIGTERM
        self._at_epoch_end = False  # interrupted at an epoch's last batch: save when the epoch has ended

    def checkpoint_path(self, trainer: pl.Trainer) -> Path:
        """Where the interrupted step is saved."""
        folder = self.dirpath
        if folder is None:
            dirpath = getattr(trainer.checkpoint_callback, "dirpath", None)
            folder = Path(dirpath) if dirpath else Path(trainer.default_root_dir) / "checkpoints"
        return folder / self.filename

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._signalled is None:
            self._signalled = now
        elif now - self._signalled > _SAME_CTRL_C_S:  # a second Ctrl-C: stop now, as if we were not here
            self._restore_handler()
            raise KeyboardInterrupt
        # else: the same Ctrl-C twice (from the terminal, and passed on by a launcher)

    def _restore_handler(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        if self._quieted_loop is not None:
            self._quieted_loop.__dict__.pop(_LIGHTNING_SIGTERM_BROADCAST, None)
            self._quieted_loop = None

    def _skip_lightning_sigterm_broadcast(self, trainer: pl.Trainer) -> None:
        """Skip Lightning's per-step broadcast of its SIGTERM flag, which our SIGTERM handler leaves always False."""
        # First, on every Lightning: a SIGTERM that Lightning's handler caught before ours was installed is ours to act
        # on.
        if getattr(trainer, "received_sigterm", False) and self._signalled is None:
            self._signalled = time.monotonic()  # a SIGTERM before training started: ours to agree on and save
        loop = trainer.fit_loop.epoch_loop
        if not hasattr(type(loop), _LIGHTNING_SIGTERM_BROADCAST):
            return  # a Lightning without it (before 2.5.2)
        setattr(loop, _LIGHTNING_SIGTERM_BROADCAST, _no_broadcast)  # on this instance only, until we restore it
        self._quieted_loop = loop

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._signalled, self.saved_path, self._at_epoch_end = None, None, False
        if threading.current_thread() is not threading.main_thread():
            rank_zero_warn("SaveOnInterrupt: training runs outside the main thread, where Python cannot catch Ctrl-C.")
            return
        # Installed after Lightning's own SIGTERM handler (registered when fit starts), which it replaces until the end.
        self._previous = {signum: signal.signal(signum, self._on_signal) for signum in self.signals}
        if signal.SIGTERM in self.signals:
            self._skip_lightning_sigterm_broadcast(trainer)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # Only where an optimizer step just completed: accumulated gradients are not part of a checkpoint.
        if trainer.fit_loop.epoch_loop._should_accumulate():
            return
        if trainer.global_step % self.check_every_n_steps:
            return  # the same on every rank (global_step agrees), so the all-reduce below always has every rank
        if not _any_rank(trainer, self._signalled is not None):
            return
        if _last_batch_of_epoch(trainer):
            # Lightning resumes a checkpoint taken after an epoch's last batch but before its end one epoch too far
            # (it counts the epoch as done, then starts the next but one: found as a Ctrl-C resume that trained an
            # epoch less). Saved once the epoch has ended instead, where Lightning's own checkpoints are taken; every
            # rank voted, so every rank waits. Remove when Lightning restarts such a checkpoint in the next epoch.
            self._at_epoch_end = True
            return
        self._save_and_stop(
            trainer, f"step {trainer.global_step} (epoch {trainer.current_epoch}, batch {batch_idx + 1})"
        )

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._at_epoch_end:
            self._at_epoch_end = False
            self._save_and_stop(trainer, f"the end of epoch {trainer.current_epoch} (step {trainer.global_step})")

    def _save_and_stop(self, trainer: pl.Trainer, where: str) -> None:
        """Save the checkpoint every rank agreed on, then stop through Lightning's KeyboardInterrupt shutdown."""
        path = self.checkpoint_path(trainer)
        trainer.save_checkpoint(
            path, weights_only=False
        )  # a full checkpoint; every rank, as ModelCheckpoint does; rank 0 writes, atomically
        wait = getattr(
            trainer.strategy, "wait_for_checkpoint", None
        )  # a background save (ShardedStrategy(async_save=True))
        if wait is not None:
            wait()  # lands before "saved" is said and the process stops
        self.saved_path = path
        rank_zero_info(
            f"Interrupted at {where}; saved {path}."
            f" Resume with `fit(..., ckpt_path={str(path)!r})` (train.py: --ckpt-path {path})."
        )
        self._restore_handler()
        if in_spawned_worker():
            # torch.multiprocessing swallows KeyboardInterrupt in a worker, which then exits 0 without results, and
            # the launcher waits for them forever. An exit code reaches it: 130, as a shell reports Ctrl-C.
            raise SystemExit(130)
        raise KeyboardInterrupt  # Lightning's graceful shutdown: on_exception hooks, teardown, exit

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore_handler()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore_handler()
        if isinstance(exception, KeyboardInterrupt):
            # Lightning now SIGKILLs the other ranks and exits this one; its child-process observer must not kill this
            # rank while it does (exit -9 instead of 130, its exit handlers cut off). CleanExit does the same.
            stop_child_observer(trainer.strategy.launcher)
