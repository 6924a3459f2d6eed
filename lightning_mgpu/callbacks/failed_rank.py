"""Name the rank that failed, for strategies launched by Lightning's script launcher (``ddp``)."""

from __future__ import annotations

import logging

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_mgpu.utilities.failures import failed_rank_report

log = logging.getLogger(__name__)


class FailedRankReporter(Callback):
    """When training fails on rank 0, say which other rank died first and how (signal or exit code).

    Under ``strategy="ddp"`` a rank killed by the OOM killer shows up on rank 0 only as "Connection reset by
    peer"; this callback adds "rank 1 (pid 1234) was killed by SIGKILL (the kernel's OOM killer, ...)". The
    bundle's ``sharded`` strategy does this by itself.

    Example::

        trainer = Trainer(strategy="ddp", devices=4, callbacks=[FailedRankReporter()])
    """

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        report = failed_rank_report(trainer.strategy)
        if report:
            log.error(report)
