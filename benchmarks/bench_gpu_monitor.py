"""Overhead of GPUUtilizationMonitor at default settings: the same training with and without it.

Six arms run side by side in every round: no callback (off), an empty callback, the monitor (on), the monitor without
its per-rank time line (no_timeline: what the time line costs), Lightning's
DeviceStatsMonitor (the built-in peer), and a callback that only logs as many keys as the monitor does, as often
(logging: the arms without a callback never log, so this separates the cost of logging itself, the logger's
writes and Lightning's bookkeeping, from the monitor's work). The order rotates from round to round so drift in
machine load hits every arm alike; the figure is the median over rounds of (time per batch with the monitor) /
(without). The same ratio is also taken in process CPU time (all threads, the monitor's sampler thread
included), which time taken by other processes on a shared machine does not inflate. The empty-callback arm
separates what Lightning charges any callback (it dispatches all six per-batch hooks to every callback, about
3-5 µs each) from what the monitor itself adds. Two more figures need no A/B at all, so load from other
processes does not blur them: the time spent inside the monitor's own hooks on the training thread as a share of
the time per batch, and the same in training-thread CPU time (the background sampler thread is not on that
path). They come from a further arm whose hooks are timed, outside the ratios; they include the timing
wrapper's own clock reads (about 1 µs per hook), so they overstate slightly.

    $ python -m benchmarks.bench_gpu_monitor                       # CPU (or the GPU if there is one), ~1 min
    $ python -m benchmarks.bench_gpu_monitor --rounds 11 --steps 300
    $ python -m benchmarks.bench_gpu_monitor --strategy ddp --devices 2

Only the public API is used: Trainer, a LightningModule, and the callback (subclassed to time
its hooks).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import tempfile
import time
from itertools import pairwise
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, DeviceStatsMonitor
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.harness import interleave
from benchmarks.harness.cli import parser
from benchmarks.harness.clock import step_clock
from benchmarks.harness.models import Trainable, mlp, random_data
from benchmarks.harness.result import figure, write_result
from benchmarks.harness.result import ratio as ratio_spec
from benchmarks.harness.trainer import quiet_trainer
from lightning_mgpu.callbacks import GPUUtilizationMonitor
from lightning_mgpu.utilities.logging_steps import batches_that_stepped


def batch_figures(clock: Any, warmup: int) -> dict[str, float]:
    """Time per batch after the warm-up, end to end (fetching, every hook of every callback, the step), from
    ``harness.clock.step_clock``: the mean in wall time and in process CPU time (every thread, the monitor's sampler
    included: time other processes take does not count), and the median batch. A batch slowed by another process lands
    in the median's tail, and so do the monitor's logging windows (1 batch in log_every_n_steps): the hook timing covers
    them."""
    ends, n = clock.ends[warmup:], len(clock.ends) - warmup
    return {
        "per_batch_s": (ends[-1] - clock.marks[warmup]) / n,
        "process_cpu_per_batch_s": (clock.cpu_ends[-1] - clock.cpu_marks[warmup]) / n,
        "median_batch_s": statistics.median([ends[0] - clock.marks[warmup], *(b - a for a, b in pairwise(ends))]),
    }


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


class EmptyCallback(Callback):
    """A callback that does nothing: what Lightning's per-callback hook dispatch costs by itself."""


class LoggingOnly(Callback):
    """Logs ``n_keys`` numbers through the loggers once per logging window, as the monitor does, and nothing else.

    It separates what logging itself costs (the logger's writes, Lightning's bookkeeping) from the monitor's own work:
    the arms without a callback never log anything.
    """

    def __init__(self, n_keys: int) -> None:
        self.n_keys = max(1, n_keys)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = batches_that_stepped(trainer) + 1  # Lightning counts this batch after on_train_batch_end
        if step % trainer.log_every_n_steps == 0:
            metrics = {f"logging_only/key{i}": float(i) for i in range(self.n_keys)}
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)


# devicestats: Lightning's DeviceStatsMonitor, the built-in peer; logging: the monitor's logging alone (LoggingOnly)
# no_timeline: the monitor with its per-rank time line off (what the time line itself costs: on / no_timeline)
ARMS = ("off", "empty", "on", "no_timeline", "devicestats", "logging")


def run(args: argparse.Namespace, arm: str, data: TensorDataset, n_keys: int = 1) -> dict[str, float]:
    """One fit. ``arm``: ``off``, ``empty``, ``on`` (the plain monitor), or ``timed`` (the monitor with its
    hooks timed; outside the A/B, since its clock reads, ~6 µs per batch, would count as overhead)."""
    clock = step_clock()
    monitor = TimedMonitor() if arm == "timed" else None
    each_arm = {
        "timed": lambda: monitor,
        "on": GPUUtilizationMonitor,
        "no_timeline": lambda: GPUUtilizationMonitor(timeline=False),
        "empty": EmptyCallback,
        "devicestats": DeviceStatsMonitor,
        "logging": lambda: LoggingOnly(n_keys),
    }
    callbacks: list[Callback] = [clock, *([each_arm[arm]()] if arm in each_arm else [])]  # off: the clock alone
    trainer = quiet_trainer(
        default_root_dir=args.root_dir,  # where the monitor's diagnosis.json goes
        strategy=args.strategy,
        devices=args.devices,
        max_steps=args.warmup + args.steps,
        callbacks=callbacks,
        # Every arm logs to the same kind of logger: DeviceStatsMonitor needs one, and the monitor logs through it.
        logger=CSVLogger(args.root_dir, name=arm),
        log_every_n_steps=50,
    )
    model = Trainable(
        mlp(args.width, args.width, args.width, 10), optimizer=lambda params: torch.optim.SGD(params, lr=0.01)
    )
    torch.manual_seed(0)
    trainer.fit(model, DataLoader(data, batch_size=args.batch_size, shuffle=True))
    out = {**batch_figures(clock, args.warmup), "rank0": trainer.is_global_zero}
    if monitor is not None:
        out["n_keys"] = len(monitor.last_metrics)  # what the monitor logs per window: the logging arm logs as many
        out["hook_s_per_batch"] = monitor.hook_s / (args.warmup + args.steps)
        out["hook_cpu_s_per_batch"] = monitor.hook_cpu_s / (args.warmup + args.steps)
    return out


def main() -> None:
    p = parser(__doc__, rounds=9, steps=150, warmup=10, width=256, batch_size=32, threads=None)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--devices", default="1")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.root_dir = tempfile.mkdtemp(prefix="bench_gpu_monitor_")
    atexit.register(shutil.rmtree, args.root_dir, ignore_errors=True)
    args.devices = int(args.devices) if args.devices.isdigit() else args.devices
    data = random_data(args.batch_size * (args.warmup + args.steps + 1) * 2, args.width, classes=10, seed=0)

    n_keys = int(run(args, "timed", data)["n_keys"])  # warm caches, imports and the allocator once, untimed
    arms = {arm: (lambda arm=arm: run(args, arm, data, n_keys)) for arm in ARMS} | {
        "timed": lambda: run(args, "timed", data)
    }
    per_arm = interleave(
        arms,
        args.rounds,
        report=os.environ.get("LOCAL_RANK", "0") == "0",  # Lightning's other ranks: 1, ...
        describe=lambda r: f"on/off {r['on']['per_batch_s'] / r['off']['per_batch_s']:.4f}",
    )
    if not per_arm["on"][-1]["rank0"]:
        return
    timed = per_arm["timed"]
    hook_pct = statistics.median(x["hook_s_per_batch"] / x["per_batch_s"] for x in timed) * 100
    write_result(
        args.result,
        name="gpu_monitor",
        unit="s/batch",
        arms={
            arm: {
                "step_s": [x["per_batch_s"] for x in per_arm[arm]],
                "median_batch_s": [x["median_batch_s"] for x in per_arm[arm]],
                "cpu_s": [x["process_cpu_per_batch_s"] for x in per_arm[arm]],
            }
            for arm in ARMS
        },
        ratios=[
            ratio_spec("monitor / no callback", "on", "off", goal=1.01),
            ratio_spec("monitor / no callback (median batch)", "on", "off", "median_batch_s", goal=1.01),
            ratio_spec("monitor / DeviceStatsMonitor", "on", "devicestats"),
            ratio_spec("monitor / the monitor without its time line", "on", "no_timeline", goal=1.01),
            ratio_spec("monitor / without its time line (process CPU)", "on", "no_timeline", "cpu_s"),
            ratio_spec("empty callback / no callback", "empty", "off"),
            ratio_spec("monitor / a callback that only logs its keys", "on", "logging"),
            ratio_spec("logging its keys only / no callback (process CPU)", "logging", "off", "cpu_s"),
            ratio_spec("monitor / logging its keys only (process CPU)", "on", "logging", "cpu_s"),
        ],
        figures={
            "monitor's training-thread hooks, % of batch time": figure(round(hook_pct, 3), goal=1.0),
            "monitor's training-thread hooks, CPU µs per batch": figure(
                round(statistics.median(x["hook_cpu_s_per_batch"] for x in timed) * 1e6, 1)
            ),
        },
        config={
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "strategy": args.strategy,
            "devices": args.devices,
            "rounds": args.rounds,
            "batches_per_run": args.steps,
            "width": args.width,
            "batch_size": args.batch_size,
            "keys_logged_per_window": n_keys,
            "median_ms_per_batch_off": round(statistics.median(x["per_batch_s"] for x in per_arm["off"]) * 1e3, 3),
        },
    )


if __name__ == "__main__":
    main()
