"""Step time of ``strategy="horovod"`` against a raw Horovod PyTorch loop and against ``ddp``.

Same model, data, batch and world size in all three; the configurations take turns in every
round (interleaved A/B/C) inside the same two Gloo workers, and the reported ratios are medians
over rounds. Step time is the wall time from the start of one optimizer step to the start of the
next (data loading, forward, backward, gradient allreduce, update); a run's figure is the median
over its ``steps`` timed steps after ``warmup``, which shrugs off other processes' bursts on a
shared machine.

    $ python -m benchmarks.bench_horovod                 # re-launches itself: horovodrun -np 2 --gloo
    $ python -m benchmarks.bench_horovod --rounds 7 --steps 50 --hidden 2048
    $ horovodrun -np 2 --gloo python -m benchmarks.bench_horovod     # the same, launched by hand

Goal: horovod / raw horovod <= 1.05. DDP runs under the same horovodrun workers, launched
"externally" (LOCAL_RANK/WORLD_SIZE/MASTER_ADDR set), so Lightning starts no processes of its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import torch
from lightning.fabric.plugins.environments.lightning import find_free_network_port
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from benchmarks.harness import interleave
from benchmarks.harness.cli import config, parser
from benchmarks.harness.clock import raw_steps
from benchmarks.harness.models import Trainable, mlp, random_data, train_step
from benchmarks.harness.ranks import repo_env
from benchmarks.harness.result import ratio, write_result
from benchmarks.harness.stats import median_interval
from benchmarks.harness.trainer import timed_fit


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, rounds=11, warmup=3, steps=15, batch_size=64, hidden=1024, threads=1)
    p.add_argument("--np", type=int, default=2, help="workers (when the script launches itself)")
    p.add_argument("--in-features", type=int, default=512)
    p.add_argument("--layers", type=int, default=3)
    return p.parse_args(argv)


def make_model(args: argparse.Namespace) -> nn.Module:
    return mlp(args.in_features, *[args.hidden] * args.layers, 10)


def make_data(args: argparse.Namespace, world: int) -> TensorDataset:
    return random_data(args.batch_size * world * (args.warmup + args.steps + 2), args.in_features, targets=10)


# ----------------------------------------------------------------------------- the three runs


def raw_horovod(args: argparse.Namespace) -> float:
    """The loop from Horovod's PyTorch guide: broadcast, DistributedOptimizer, step."""
    import horovod.torch as hvd

    model = make_model(args)
    data = make_data(args, hvd.size())
    loader = DataLoader(
        data, batch_size=args.batch_size, sampler=DistributedSampler(data, hvd.size(), hvd.rank(), shuffle=True)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    marks = raw_steps(train_step(model, optimizer), loader, args.warmup + args.steps + 1, torch.device("cpu"))[0]
    return median_interval(marks, args.warmup, args.steps)


def lightning_run(args: argparse.Namespace, strategy: str, env: dict[str, str]) -> float:
    os.environ.update(env)  # the external launch's variables (DDP's teardown deletes WORLD_SIZE)
    # The ddp arm shares horovodrun's workers on purpose; LauncherGuard would (rightly, elsewhere) refuse a non-horovod
    # strategy under horovodrun, so horovodrun's variables are hidden from it for that arm (Horovod is initialised).
    hidden = {
        k: os.environ.pop(k) for k in ("HOROVOD_SIZE", "HOROVOD_RANK") if strategy != "horovod" and k in os.environ
    }

    def loader(m):
        return DataLoader(make_data(args, m.trainer.world_size), batch_size=args.batch_size, shuffle=True)

    try:
        clock = timed_fit(
            Trainable(make_model(args), "mse_loss", loader=loader),
            warmup=args.warmup,
            steps=args.steps,
            strategy=strategy,
            accelerator="cpu",
            devices=int(os.environ["WORLD_SIZE"]),
        )
    finally:
        os.environ.update(hidden)
        if strategy != "horovod" and torch.distributed.is_initialized():
            # Left alive, the ddp arm's gloo group would tax the horovod arm: Lightning broadcasts its SIGTERM flag
            # before every step whenever torch.distributed is initialised, which it never is under horovodrun alone.
            torch.distributed.destroy_process_group()
    return median_interval(clock.marks, args.warmup, args.steps)


# ----------------------------------------------------------------------------- driver


def worker(args: argparse.Namespace) -> None:
    import horovod.torch as hvd
    import lightning.pytorch as pl

    hvd.init()
    torch.set_num_threads(args.threads)
    # The ddp runs reuse these workers: Lightning sees an external launch and starts nothing itself.
    # Named: unnamed broadcast_object calls are named after the object's type, which differs by rank here.
    port = hvd.broadcast_object(find_free_network_port() if hvd.rank() == 0 else 0, root_rank=0, name="bench.port")
    env = dict(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(hvd.size()),
        LOCAL_RANK=str(hvd.local_rank()),
        NODE_RANK="0",
    )
    pl.seed_everything(0, verbose=False)
    calls = iter(range(10**9))  # every worker makes the same calls in the same order: a shared name for each all-reduce

    def slowest(seconds: float) -> float:
        """Every worker steps in lockstep: the slowest worker's figure."""
        return float(hvd.allreduce(torch.tensor(seconds), op=hvd.Max, name=f"bench.{next(calls)}"))

    times = interleave(
        {
            "raw": lambda: slowest(raw_horovod(args)),
            "horovod": lambda: slowest(lightning_run(args, "horovod", env)),
            "ddp": lambda: slowest(lightning_run(args, "ddp", env)),
        },
        args.rounds,
        report=hvd.rank() == 0,
    )
    if hvd.rank() == 0:
        write_result(
            args.result,
            name="horovod",
            arms={k: {"step_s": v} for k, v in times.items()},
            ratios=[
                ratio("horovod / raw Horovod loop", "horovod", "raw", goal=1.03),
                ratio("horovod / ddp", "horovod", "ddp"),
                ratio("ddp / raw Horovod loop", "ddp", "raw"),
            ],
            config={
                **config(
                    args, "np", "rounds", "warmup", "steps", "batch_size", "in_features", "hidden", "layers", "threads"
                ),
                "params": sum(p.numel() for p in make_model(args).parameters()),
                "world_size": hvd.size(),
            },
        )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if "HOROVOD_RANK" in os.environ:
        worker(args)
        return
    horovodrun = Path(sys.executable).with_name("horovodrun")
    cmd = [str(horovodrun), "-np", str(args.np), "--gloo", sys.executable, "-m", __spec__.name, *(argv or sys.argv[1:])]
    sys.exit(subprocess.call(cmd, env=repo_env(PYTHONWARNINGS="ignore")))


if __name__ == "__main__":
    main(sys.argv[1:])
