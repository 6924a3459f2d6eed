"""Benchmark ``strategy='dp'``: its step time against the bare model, and DP against DDP on several GPUs.

On one device (the CPU, or one GPU) ``dp`` runs as a single-device strategy, so it should cost
nothing: the goal is a median step-time ratio ``dp / bare model <= 1.02``. Three arms train the
same ``ImageClassifier`` on the same synthetic batches, in interleaved rounds (the order
alternates every round); each run's step time is the median of its timed steps, and a ratio is
the median of the per-round ratios:

- ``dp``:        ``Trainer(strategy="dp")``;
- ``lightning``: the bare LightningModule under Lightning's default single-device strategy;
- ``torch``:     a hand-written PyTorch loop (forward, loss, backward, step, zero_grad), for scale.

With ``--accelerator gpu`` and two or more GPUs it also measures, at the same per-GPU batch:

- throughput (samples/s) of ``dp`` against ``ddp`` (DDP runs in its own processes, launched by
  Lightning, alternating with ``dp`` rounds);
- the peak memory of every GPU under ``dp`` (``torch.cuda.max_memory_allocated``): GPU 0 holds the
  module, the optimizer state and the gathered outputs, the others only replicas and activations.

Run::

    python benchmarks/bench_dp.py                           # CPU, about a minute on an idle core
    python benchmarks/bench_dp.py --rounds 7 --steps 40
    python benchmarks/bench_dp.py --accelerator gpu         # 1 GPU: dp vs bare; >= 2 GPUs: + DP vs DDP

Only public APIs are used: Lightning's ``Trainer`` with the ``dp``/``ddp`` names and
``lightning_mgpu.demos``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import lightning_mgpu  # noqa: F401  (registers "dp")
from harness.result import ratio, write_result
from lightning_mgpu.demos import ImageClassifier
from lightning_mgpu.demos.synthetic import make_synthetic_images


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--rounds", default=9, type=int, help="interleaved A/B rounds")
    p.add_argument("--steps", default=20, type=int, help="timed steps per run")
    p.add_argument("--warmup", default=5, type=int, help="untimed steps per run")
    p.add_argument("--batch-size", default=32, type=int, help="per device")
    p.add_argument("--width", default=16, type=int, help="ImageClassifier width")
    p.add_argument("--image-size", default=16, type=int)
    p.add_argument("--threads", default=1, type=int, help="torch CPU threads (1 keeps CPU timings steady)")
    p.add_argument("--json", default=None, type=Path, help="also write the results here")
    p.add_argument("--result", default=None, type=Path, help="write every round for benchmarks/run.py here")
    # Internal: one DDP measurement in processes launched by Lightning.
    p.add_argument("--worker", default=None, choices=("ddp",), help=argparse.SUPPRESS)
    p.add_argument("--devices", default=1, type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


class StepTimer(Callback):
    """Wall time of each training step (training_step, backward, optimizer step), after warm-up."""

    def __init__(self, warmup: int, sync_cuda: bool) -> None:
        self.warmup = warmup
        self.sync_cuda = sync_cuda
        self.times: list[float] = []
        self._t0 = 0.0

    def _now(self) -> float:
        if self.sync_cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._t0 = self._now()

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        elapsed = self._now() - self._t0
        if trainer.global_step > self.warmup:
            self.times.append(elapsed)


def make_loader(args: argparse.Namespace, batch: int) -> DataLoader:
    steps = args.warmup + args.steps
    x, y = make_synthetic_images(batch * steps, (3, args.image_size, args.image_size), 10, seed=0)
    return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=False, drop_last=True)


def make_model(args: argparse.Namespace) -> ImageClassifier:
    torch.manual_seed(0)
    return ImageClassifier(in_channels=3, num_classes=10, width=args.width, lr=0.01)


def lightning_run(args: argparse.Namespace, strategy: str, devices: int) -> tuple[float, list[int]]:
    """Median step seconds of one fit, and the peak memory of every GPU it used."""
    gpu = args.accelerator == "gpu"
    if gpu:
        for i in range(devices):
            torch.cuda.reset_peak_memory_stats(i)
    timer = StepTimer(args.warmup, sync_cuda=gpu)
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator=args.accelerator,
        devices=devices,
        max_steps=args.warmup + args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[timer],
    )
    # dp splits one loader batch across its devices: per-device batch x devices.
    batch = args.batch_size * (trainer.num_devices if strategy == "dp" else 1)
    trainer.fit(make_model(args), train_dataloaders=make_loader(args, batch))
    peaks = [torch.cuda.max_memory_allocated(i) for i in range(devices)] if gpu else []
    return statistics.median(timer.times), peaks


def torch_run(args: argparse.Namespace) -> float:
    """The bare model in a hand-written loop on the same device."""
    device = torch.device("cuda", 0) if args.accelerator == "gpu" else torch.device("cpu")
    model = make_model(args).to(device)
    optimizer = model.configure_optimizers()
    times: list[float] = []
    for step, (x, y) in enumerate(make_loader(args, args.batch_size)):
        x, y = x.to(device), y.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ddp_run(args: argparse.Namespace, devices: int) -> tuple[float, list[int]]:
    """One DDP fit in fresh processes; returns rank 0's median step seconds and every rank's peak memory."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cmd = [sys.executable, __file__, "--worker", "ddp", "--devices", str(devices), "--out", str(out), "--accelerator", "gpu"]
        cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size)]
        cmd += ["--width", str(args.width), "--image-size", str(args.image_size)]
        subprocess.run(cmd, check=True, timeout=600)
        ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    return ranks[0]["step_seconds"], [r["peak_bytes"] for r in ranks]


def ddp_worker(args: argparse.Namespace) -> None:
    timer = StepTimer(args.warmup, sync_cuda=True)
    trainer = pl.Trainer(
        strategy="ddp",
        accelerator="gpu",
        devices=args.devices,
        max_steps=args.warmup + args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[timer],
    )
    trainer.fit(make_model(args), train_dataloaders=make_loader(args, args.batch_size))  # per rank: the same per-GPU batch as dp's split
    rank = trainer.global_rank
    result = {"step_seconds": statistics.median(timer.times), "peak_bytes": torch.cuda.max_memory_allocated()}
    (args.out / f"rank{rank}.json").write_text(json.dumps(result))


def ratio_summary(a: list[float], b: list[float]) -> dict[str, Any]:
    ratios = [x / y for x, y in zip(a, b)]
    return {"median_ratio": statistics.median(ratios), "ratios": [round(r, 4) for r in ratios]}


def single_device(args: argparse.Namespace) -> dict[str, Any]:
    arms: dict[str, list[float]] = {"dp": [], "lightning": [], "torch": []}
    runners = {
        "dp": lambda: lightning_run(args, "dp", 1)[0],
        "lightning": lambda: lightning_run(args, "auto", 1)[0],
        "torch": lambda: torch_run(args),
    }
    order = list(arms)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else reversed(order):
            arms[name].append(runners[name]())
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1] * 1e3:.2f} ms" for k, v in arms.items()), flush=True)
    return {
        "arms": arms,
        "median_step_ms": {k: round(statistics.median(v) * 1e3, 3) for k, v in arms.items()},
        "dp_vs_bare_model": ratio_summary(arms["dp"], arms["lightning"]),
        "dp_vs_torch_loop": ratio_summary(arms["dp"], arms["torch"]),
    }


def multi_gpu(args: argparse.Namespace, n: int) -> dict[str, Any]:
    dp_times: list[float] = []
    ddp_times: list[float] = []
    dp_peaks: list[int] = []
    ddp_peaks: list[int] = []
    for r in range(args.rounds):
        for name in ("dp", "ddp") if r % 2 == 0 else ("ddp", "dp"):
            if name == "dp":
                seconds, dp_peaks = lightning_run(args, "dp", n)
                dp_times.append(seconds)
            else:
                seconds, ddp_peaks = ddp_run(args, n)
                ddp_times.append(seconds)
        print(f"round {r + 1}/{args.rounds}: dp {dp_times[-1] * 1e3:.2f} ms, ddp {ddp_times[-1] * 1e3:.2f} ms per step", flush=True)
    samples = args.batch_size * n
    mib = [round(p / 2**20, 1) for p in dp_peaks]
    return {
        "arms": {"dp": dp_times, "ddp": ddp_times},
        "gpus": n,
        "samples_per_step": samples,
        "dp_samples_per_s": round(samples / statistics.median(dp_times), 1),
        "ddp_samples_per_s": round(samples / statistics.median(ddp_times), 1),
        "dp_over_ddp_throughput": ratio_summary(ddp_times, dp_times),
        "dp_peak_memory_mib_per_gpu": mib,
        "dp_gpu0_over_mean_of_others": round(dp_peaks[0] / (sum(dp_peaks[1:]) / (n - 1)), 3),
        "ddp_peak_memory_mib_per_rank": [round(p / 2**20, 1) for p in ddp_peaks],
    }


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.worker == "ddp":
        ddp_worker(args)
        return None
    if args.accelerator == "gpu" and not torch.cuda.is_available():
        raise SystemExit("--accelerator gpu needs CUDA; run on the CPU with the default --accelerator cpu.")
    pl.seed_everything(0, verbose=False)
    device = torch.cuda.get_device_name(0) if args.accelerator == "gpu" else "cpu"
    results: dict[str, Any] = {"device": device, "batch_size_per_device": args.batch_size, "single_device": single_device(args)}
    n = torch.cuda.device_count() if args.accelerator == "gpu" else 0
    if n >= 2:
        results["multi_gpu"] = multi_gpu(args, n)
    arms = {f"{k}": {"step_s": v} for k, v in results["single_device"].pop("arms").items()}
    ratios = [ratio("dp / bare LightningModule (1 device)", "dp", "lightning", goal=1.02),
              ratio("dp / raw torch loop (1 device)", "dp", "torch")]
    if "multi_gpu" in results:
        multi = results["multi_gpu"].pop("arms")
        arms.update({f"{k}_{n}gpu": {"step_s": v} for k, v in multi.items()})
        ratios.append(ratio(f"dp / ddp step time ({n} GPUs)", f"dp_{n}gpu", f"ddp_{n}gpu"))
    config = {k: getattr(args, k) for k in ("accelerator", "rounds", "steps", "warmup", "batch_size", "width", "image_size", "threads")}
    write_result(args.result, name="dp", arms=arms, ratios=ratios, config=config)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
