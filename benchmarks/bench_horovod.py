"""Step time of ``strategy="horovod"`` against a raw Horovod PyTorch loop and against ``ddp``.

Same model, data, batch and world size in all three; the configurations take turns in every
round (interleaved A/B/C) inside the same two Gloo workers, and the reported ratios are medians
over rounds. Step time is the wall time from the start of one optimizer step to the start of the
next (data loading, forward, backward, gradient allreduce, update); a run's figure is the median
over its ``steps`` timed steps after ``warmup``, which shrugs off other processes' bursts on a
shared machine.

    $ python benchmarks/bench_horovod.py                 # re-launches itself: horovodrun -np 2 --gloo
    $ python benchmarks/bench_horovod.py --rounds 7 --steps 50 --hidden 2048
    $ horovodrun -np 2 --gloo python benchmarks/bench_horovod.py     # the same, launched by hand

Goal: horovod / raw horovod <= 1.05. DDP runs under the same horovodrun workers, launched
"externally" (LOCAL_RANK/WORLD_SIZE/MASTER_ADDR set), so Lightning starts no processes of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from harness.clock import step_clock
from harness.result import progress, ratio, write_result
from harness.stats import median_interval
from lightning.fabric.plugins.environments.lightning import find_free_network_port


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
    torch.manual_seed(0)
    dims = [args.in_features] + [args.hidden] * args.layers
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(dims[-1], 10))


def make_data(args: argparse.Namespace, world: int) -> TensorDataset:
    n = args.batch_size * world * (args.warmup + args.steps + 2)
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, args.in_features, generator=g), torch.randn(n, 10, generator=g))


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
    import lightning.pytorch as pl

    import lightning_mgpu  # noqa: F401  (registers "horovod")

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_model(args)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(make_data(args, self.trainer.world_size), batch_size=args.batch_size, shuffle=True)

    clock = step_clock()  # gloo on CPU: nothing queued to wait for
    # DDP's teardown deletes WORLD_SIZE; restore the external-launch variables before every run.
    os.environ.update(env)
    # The ddp arm shares horovodrun's workers on purpose; LauncherGuard would (rightly, elsewhere) refuse a non-horovod
    # strategy under horovodrun, so horovodrun's variables are hidden from it for that arm (Horovod is initialised).
    hidden = {k: os.environ.pop(k) for k in ("HOROVOD_SIZE", "HOROVOD_RANK") if strategy != "horovod" and k in os.environ}
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator="cpu",
        devices=int(os.environ["WORLD_SIZE"]),
        max_steps=args.warmup + args.steps + 1,
        callbacks=[clock],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    try:
        trainer.fit(Module())
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
    runs = {
        "raw": lambda: raw_horovod(args),
        "horovod": lambda: lightning_run(args, "horovod", env),
        "ddp": lambda: lightning_run(args, "ddp", env),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(args.rounds):
        # Rotate the order so no configuration always runs first (warm caches) or last.
        names = list(runs)[r % 3 :] + list(runs)[: r % 3]
        for name in names:
            seconds = runs[name]()
            # Every worker steps in lockstep; take the slowest worker's figure.
            times[name].append(float(hvd.allreduce(torch.tensor(seconds), op=hvd.Max, name=f"bench.{name}.{r}")))
        if hvd.rank() == 0:
            progress(r + 1, args.rounds)
    if hvd.rank() == 0:
        report(args, times, hvd.size())


def report(args: argparse.Namespace, times: dict[str, list[float]], world: int) -> None:
    params = sum(p.numel() for p in make_model(args).parameters())
    print(f"\nbench_horovod: {world} Gloo workers, MLP {params / 1e6:.2f}M params, batch {args.batch_size}/worker,"
          f" {args.steps} timed steps x {args.rounds} rounds, torch threads {args.threads}")
    print(f"{'round':>5} {'raw hvd ms':>11} {'horovod ms':>11} {'ddp ms':>8} {'hvd/raw':>8} {'hvd/ddp':>8}")
    for r in range(args.rounds):
        raw, hv, dd = times["raw"][r], times["horovod"][r], times["ddp"][r]
        print(f"{r:>5} {raw * 1e3:>11.2f} {hv * 1e3:>11.2f} {dd * 1e3:>8.2f} {hv / raw:>8.3f} {hv / dd:>8.3f}")
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    vs_raw = statistics.median(h / r for h, r in zip(times["horovod"], times["raw"]))
    vs_ddp = statistics.median(h / d for h, d in zip(times["horovod"], times["ddp"]))
    print(f"median step: raw horovod {med['raw']:.2f} ms, strategy='horovod' {med['horovod']:.2f} ms, ddp {med['ddp']:.2f} ms")
    print(f"median ratio horovod/raw-horovod = {vs_raw:.3f} (goal <= 1.05: {'met' if vs_raw <= 1.05 else 'NOT met'})")
    print(f"median ratio horovod/ddp = {vs_ddp:.3f}")
    config = {k: getattr(args, k) for k in ("np", "rounds", "warmup", "steps", "batch_size", "in_features", "hidden", "layers", "threads")}
    write_result(
        args.result, name="horovod", arms={k: {"step_s": v} for k, v in times.items()},
        ratios=[ratio("horovod / raw Horovod loop", "horovod", "raw", goal=1.03), ratio("horovod / ddp", "horovod", "ddp"),
                ratio("ddp / raw Horovod loop", "ddp", "raw")],
        config={**config, "params": params, "world_size": world},
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if "HOROVOD_RANK" in os.environ:
        worker(args)
        return
    horovodrun = Path(sys.executable).with_name("horovodrun")
    cmd = [str(horovodrun), "-np", str(args.np), "--gloo", sys.executable, str(Path(__file__).resolve()), *(argv or sys.argv[1:])]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    sys.exit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main(sys.argv[1:])
