"""End a distributed job cleanly: on success, release the process group; on failure, name the rank that failed."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_mgpu.utilities.child_observer import stop_child_observer
from lightning_mgpu.utilities.failures import on_training_failure
from lightning_mgpu.utilities.process_group import (
    destroy_at_exit,
    destroy_process_group_if_done,
    in_spawned_worker,
)


class CleanExit(Callback):
    """Make Lightning's own ``ddp``/``ddp_spawn`` end the way the bundle's strategies do.

    - **Success:** the process group is destroyed before the process exits (at the end of fit in a spawned worker,
      at interpreter exit otherwise). Without it a gloo worker can abort at shutdown with "terminate called
      without an active exception" (SIGABRT), and a job that finished reports a failure.
    - **Ctrl-C:** under Lightning's ``ddp`` launcher, rank 0 exits with its own code (``train.py``: 130) and runs its
      exit handlers to the end; Lightning's child-process observer would otherwise SIGKILL it while it exits
      (:func:`~lightning_mgpu.utilities.child_observer.stop_child_observer`).
    - **Failure:** the group is left alone (other ranks may be inside a collective; destroying it could hang), and
      rank 0 says which other rank died first and how: under ``ddp`` a rank killed by the OOM killer otherwise
      shows only as "Connection reset by peer" ("rank 1 (pid 1234) was killed by SIGKILL (...)").

    Example::

        trainer = Trainer(strategy="ddp", devices=4, callbacks=[CleanExit()])
    """

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        destroy_at_exit()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # A spawned worker exits right after this; nothing collective follows in Lightning's spawn launcher. The
        # bundle's spawn launcher hands the weights back through the strategy's `handoff_state_dict` when it has one
        # (FSDP2 gathers its shards: a collective after teardown), and destroys the group itself once that is done.
        handoff = getattr(trainer.strategy, "handoff_state_dict", None)
        if in_spawned_worker() and trainer.state.status != "interrupted" and handoff is None:
            destroy_process_group_if_done()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        interrupted = isinstance(exception, KeyboardInterrupt)
        if interrupted:
            # Lightning now SIGKILLs the other ranks and exits; its observer thread must not kill this rank mid-exit.
            stop_child_observer(trainer.strategy.launcher)
        # After Ctrl-C every rank stops on purpose; naming "the rank that failed" would mislead.
        on_training_failure(trainer.strategy, report=not interrupted)
