"""Train the parity model under a strategy and inject one fault: ``python -m tests.integration.runners.run_faulty``.

    --strategy ddp|ddp_spawn|sharded|sharded_spawn|horovod --fault raise|kill --rank R --step S --out DIR [--linger T]

``raise`` makes rank R raise at training step S; ``kill`` makes rank R SIGKILL itself there (an OOM killer, a
pre-empted node). ``--linger T``: after raising, rank R closes its connections first thing at exit and then takes T
seconds more to end, so another rank, whose collective breaks, ends sooner. Every process writes ``pid_rank{r}`` and
``port_rank{r}`` first, so the test can check that no process and no listening port is left behind.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import time
from pathlib import Path

import lightning.pytorch as pl

import lightning_mgpu  # noqa: F401  (registers the bundle's strategy names)
from lightning_mgpu.testing.parity import ParityModule
from tests.helpers.trainer import quiet_trainer


class InjectedFault(RuntimeError):
    """The fault this harness raises on purpose."""


class FaultInjector(pl.Callback):
    def __init__(self, fault: str, rank: int, step: int, out: Path, linger: float = 0.0) -> None:
        self.fault, self.rank, self.step, self.out, self.linger = fault, rank, step, out, linger

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        (self.out / f"pid_rank{trainer.global_rank}").write_text(str(os.getpid()))
        # The rendezvous port the job listens on (torch.distributed's store, or Horovod's gloo rendezvous server).
        port = os.environ.get("MASTER_PORT") or os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
        if port:
            (self.out / f"port_rank{trainer.global_rank}").write_text(port)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_rank != self.rank or trainer.global_step != self.step:
            return
        if self.fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.linger:
            atexit.register(_close_then_linger, self.linger)  # registered last: runs first at exit
        raise InjectedFault(f"injected fault on rank {self.rank} at step {self.step}")


def _close_then_linger(seconds: float) -> None:
    """Tear the process group down (the peers' collectives break now), then take ``seconds`` more to exit."""
    from lightning_mgpu.utilities.process_group import destroy_all_groups

    destroy_all_groups()  # after the failure, which destroy_process_group_if_done would leave alone
    time.sleep(seconds)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", required=True)
    p.add_argument("--fault", choices=("raise", "kill"), required=True)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--step", type=int, default=3)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--linger", type=float, default=0.0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pid_launcher").write_text(str(os.getpid()))
    trainer = quiet_trainer(
        strategy=args.strategy,
        devices=2,
        max_steps=40,
        use_distributed_sampler=False,
        callbacks=[FaultInjector(args.fault, args.rank, args.step, args.out, args.linger)],  # CleanExit: quiet_trainer
    )
    trainer.fit(ParityModule(global_batch=8, num_samples=8 * 40))


if __name__ == "__main__":
    main()
