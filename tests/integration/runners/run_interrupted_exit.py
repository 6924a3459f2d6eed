"""Rank 0 of a two-process ``ddp`` fit is interrupted (the KeyboardInterrupt a Ctrl-C raises) and then spends
``--exit-s`` seconds in its exit handlers, as a logger flushing or a checkpoint landing would. Lightning's observer of
the child ranks checks them every 5 s: without ``CleanExit`` it SIGKILLs rank 0 inside that time.

Run by ``tests/integration/callbacks/test_clean_exit.py``; prints ``EXIT HANDLERS DONE`` when they ran to the end.
"""

from __future__ import annotations

import argparse
import atexit
import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel

from lightning_mgpu.callbacks import CleanExit
from tests.helpers.trainer import QUIET


class InterruptedOnRankZero(BoringModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_rank == 0 and batch_idx == 2:
            raise KeyboardInterrupt  # what Ctrl-C raises in the main process
        return super().training_step(batch, batch_idx)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exit-s", type=float, default=6.0, help="longer than the observer's 5 s between checks")
    parser.add_argument("--without-clean-exit", action="store_true")
    args = parser.parse_args()

    def slow_exit() -> None:
        time.sleep(args.exit_s)
        print("EXIT HANDLERS DONE", flush=True)

    atexit.register(slow_exit)
    # The tests' quiet settings; CleanExit only where the scenario asks for it.
    trainer = pl.Trainer(
        **QUIET,
        strategy="ddp",
        devices=2,
        max_epochs=1,
        limit_train_batches=8,
        callbacks=[] if args.without_clean_exit else [CleanExit()],
    )
    trainer.fit(InterruptedOnRankZero())


if __name__ == "__main__":
    main()
