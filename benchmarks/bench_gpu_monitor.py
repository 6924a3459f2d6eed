"""Overhead of GPUUtilizationMonitor at default settings: the same training with and without it.

Rounds alternate the order (off/on, on/off, ...) so drift in machine load hits both arms alike;
the figure is the median over rounds of (time per batch with the monitor) / (without). Two more figures need no
A/B at all, so load from other processes does not blur them: the time spent inside the monitor's
own hooks on the training thread as a share of the time per batch, and the same in training-thread
CPU time (the background sampler thread is not on that path). They include the timing wrapper's
own cost of about 1 µs per hook, so they overstate slightly.

    $ python benchmarks/bench_gpu_monitor.py                       # CPU (or the GPU if there is one), ~1 min
    $ python benchmarks/bench_gpu_monitor.py --rounds 11 --steps 300
    $ python benchmarks/bench_gpu_monitor.py --strategy ddp --devices 2

Only the public API is used: Trainer, a LightningModule, and the callback (subclassed to time
its hooks).
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import shutil
import statistics
import tempfile
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import GPUUtilizationMonitor


class Model(pl.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class BatchClock(Callback):
    """Time per batch after a warm-up, identical in both arms."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.t0, self.t1, self.c0, self.c1, self.n = warmup, 0.0, 0.0, 0.0, 0.0, 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        if batch_idx == self.warmup:
            self.t0, self.c0 = time.perf_counter(), time.thread_time()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx >= self.warmup:
            self.t1, self.c1, self.n = time.perf_counter(), time.thread_time(), batch_idx - self.warmup + 1

    @property
    def per_batch(self) -> float:
        return (self.t1 - self.t0) / max(self.n, 1)

    @property
    def cpu_per_batch(self) -> float:
        """Training-thread CPU time per batch: what other processes on the machine do not inflate."""
        return (self.c1 - self.c0) / max(self.n, 1)


class TimedMonitor(GPUUtilizationMonitor):
    """The monitor at defaults, with the time spent in its training-thread hooks added up."""

    hook_s = 0.0
    hook_cpu_s = 0.0

    def _timed(name: str):  # noqa: N805  (a decorator factory in the class body)
        def hook(self, *args: Any, **kwargs: Any) -> Any:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return getattr(GPUUtilizationMonitor, name)(self, *args, **kwargs)
            finally:
                self.hook_s += time.perf_counter() - t
                self.hook_cpu_s += time.thread_time() - c

        return hook

    on_train_batch_start = _timed("on_train_batch_start")
    on_train_batch_end = _timed("on_train_batch_end")
    on_before_optimizer_step = _timed("on_before_optimizer_step")


def run(args: argparse.Namespace, monitored: bool, data: TensorDataset) -> dict[str, float]:
    clock = BatchClock(args.warmup)
    callbacks: list[Callback] = [clock]
    monitor = TimedMonitor() if monitored else None
    if monitor is not None:
        callbacks.append(monitor)
    trainer = pl.Trainer(
        default_root_dir=args.root_dir,  # where the monitor's diagnosis.json goes (no logger here)
        strategy=args.strategy, devices=args.devices, max_steps=args.warmup + args.steps, callbacks=callbacks, logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, limit_val_batches=0,
    )
    torch.manual_seed(0)
    trainer.fit(Model(args.width), DataLoader(data, batch_size=args.batch_size, shuffle=True))
    out = {"per_batch_s": clock.per_batch, "cpu_per_batch_s": clock.cpu_per_batch, "rank0": trainer.is_global_zero}
    if monitor is not None:
        out["hook_s_per_batch"] = monitor.hook_s / (args.warmup + args.steps)
        out["hook_cpu_s_per_batch"] = monitor.hook_cpu_s / (args.warmup + args.steps)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=150, help="timed batches per run (after --warmup)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--devices", default="1")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 steadies timings on a shared machine)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.root_dir = tempfile.mkdtemp(prefix="bench_gpu_monitor_")
    atexit.register(shutil.rmtree, args.root_dir, ignore_errors=True)
    # Quiet Lightning's per-fit banners and the monitor's per-fit diagnosis table.
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    args.devices = int(args.devices) if args.devices.isdigit() else args.devices
    g = torch.Generator().manual_seed(0)
    n = args.batch_size * (args.warmup + args.steps + 1) * 2
    data = TensorDataset(torch.randn(n, args.width, generator=g), torch.randint(0, 10, (n,), generator=g))

    run(args, True, data)  # warm caches, imports and the allocator once, untimed
    ratios, off_s, on_s, hook_share, hook_cpu_share, hook_us = [], [], [], [], [], []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        res = {m: run(args, m, data) for m in order}
        off, on = res[False]["per_batch_s"], res[True]["per_batch_s"]
        off_s.append(off)
        on_s.append(on)
        ratios.append(on / off)
        hook_share.append(res[True]["hook_s_per_batch"] / on)
        hook_cpu_share.append(res[True]["hook_cpu_s_per_batch"] / res[True]["cpu_per_batch_s"])
        hook_us.append(res[True]["hook_cpu_s_per_batch"] * 1e6)
        if res[True]["rank0"]:
            print(f"round {r + 1}/{args.rounds}: off {off * 1e3:7.3f} ms/batch  on {on * 1e3:7.3f} ms/batch  ratio {on / off:.4f}", flush=True)
    if not res[True]["rank0"]:
        return
    summary = {
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "strategy": args.strategy,
        "devices": args.devices,
        "rounds": args.rounds,
        "batches_per_run": args.steps,
        "median_ms_per_batch_off": round(statistics.median(off_s) * 1e3, 3),
        "median_ms_per_batch_on": round(statistics.median(on_s) * 1e3, 3),
        "median_ratio_on_over_off": round(statistics.median(ratios), 4),
        "median_overhead_pct": round((statistics.median(ratios) - 1) * 100, 2),
        "ratio_min_max": [round(min(ratios), 4), round(max(ratios), 4)],
        "hook_time_pct_of_batch": round(statistics.median(hook_share) * 100, 3),
        "hook_cpu_pct_of_batch_cpu": round(statistics.median(hook_cpu_share) * 100, 3),
        "hook_cpu_us_per_batch": round(statistics.median(hook_us), 1),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
