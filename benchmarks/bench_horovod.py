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
import time
from pathlib import Path

import torch
from lightning.fabric.plugins.environments.lightning import find_free_network_port
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from benchmarks.harness import interleave
from benchmarks.harness.clock import step_clock
from benchmarks.harness.models import Trainable, mlp, random_data
from benchmarks.harness.ranks import repo_env
from benchmarks.harness.result import ratio, write_result
from benchmarks.harness.stats import median_interval
from benchmarks.harness.trainer import quiet_trainer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="workers (when the script launches itself)")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--warmup", type=int, default=3, help="steps before timing starts, per run")
    p.add_argument("--steps", type=int, default=15, help="timed steps per run")
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--in-features", type=int, default=512)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (2 workers on 2 cores: 1)")
    p.add_argument("--result", type=Path, default=None, help="write every round for benchmarks/run.py here")
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
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data, hvd.size(), hvd.rank(), shuffle=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    marks: list[float] = []
    for x, y in loader:
        marks.append(time.perf_counter())
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if len(marks) > args.warmup + args.steps:
            break
    return median_interval(marks, args.warmup, args.steps)


def lightning_run(args: argparse.Namespace, strategy: str, env: dict[str, str]) -> float:
    clock = step_clock()  # gloo on CPU: nothing queued to wait for
    # DDP's teardown deletes WORLD_SIZE; restore the external-launch variables before every run.
    os.environ.update(env)
    # The ddp arm shares horovodrun's workers on purpose; LauncherGuard would (rightly, elsewhere) refuse a non-horovod
    # strategy under horovodrun, so horovodrun's variables are hidden from it for that arm (Horovod is initialised).
    hidden = {k: os.environ.pop(k) for k in ("HOROVOD_SIZE", "HOROVOD_RANK") if strategy != "horovod" and k in os.environ}
    loader = lambda m: DataLoader(make_data(args, m.trainer.world_size), batch_size=args.batch_size, shuffle=True)
    try:
        quiet_trainer(strategy=strategy, accelerator="cpu", devices=int(os.environ["WORLD_SIZE"]), max_steps=args.warmup + args.steps + 1,
                      callbacks=[clock]).fit(Trainable(make_model(args), "mse_loss", loader=loader))  # fmt: skip
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
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(hvd.size()), LOCAL_RANK=str(hvd.local_rank()), NODE_RANK="0")
    pl.seed_everything(0, verbose=False)
    calls = iter(range(10**9))  # every worker makes the same calls in the same order: a shared name for each all-reduce

    def slowest(seconds: float) -> float:
        """Every worker steps in lockstep: the slowest worker's figure."""
        return float(hvd.allreduce(torch.tensor(seconds), op=hvd.Max, name=f"bench.{next(calls)}"))

    times = interleave({
        "raw": lambda: slowest(raw_horovod(args)),
        "horovod": lambda: slowest(lightning_run(args, "horovod", env)),
        "ddp": lambda: slowest(lightning_run(args, "ddp", env)),
    }, args.rounds, report=hvd.rank() == 0)  # fmt: skip
    if hvd.rank() == 0:
        config = {k: getattr(args, k) for k in ("np", "rounds", "warmup", "steps", "batch_size", "in_features", "hidden", "layers", "threads")}
        write_result(
            args.result, name="horovod", arms={k: {"step_s": v} for k, v in times.items()},
            ratios=[ratio("horovod / raw Horovod loop", "horovod", "raw", goal=1.03), ratio("horovod / ddp", "horovod", "ddp"),
                    ratio("ddp / raw Horovod loop", "ddp", "raw")],
            config={**config, "params": sum(p.numel() for p in make_model(args).parameters()), "world_size": hvd.size()},
        )  # fmt: skip


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
