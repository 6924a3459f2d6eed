"""Benchmark ``strategy='dp'``: its step time against the bare model, and DP against DDP on several GPUs.

On one device (the CPU, or one GPU) ``dp`` runs as a single-device strategy, so it should cost
nothing: the goal is a median step-time ratio ``dp / bare model <= 1.02``. Three arms train the
same ``ImageClassifier`` on the same synthetic batches, in interleaved rounds (the order
rotates every round); each run's step time is the median of its timed steps, and a ratio is
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

    python -m benchmarks.bench_dp                           # CPU, about a minute on an idle core
    python -m benchmarks.bench_dp --rounds 7 --steps 40
    python -m benchmarks.bench_dp --accelerator gpu         # 1 GPU: dp vs bare; >= 2 GPUs: + DP vs DDP

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
from functools import partial
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.harness import interleave
from benchmarks.harness.cli import config, parser
from benchmarks.harness.clock import step_clock, timed
from benchmarks.harness.models import train_step
from benchmarks.harness.ranks import REPO_ROOT, repo_env
from benchmarks.harness.result import figure, ratio, write_result
from benchmarks.harness.stats import median_duration
from benchmarks.harness.trainer import quiet_trainer
from lightning_mgpu.demos import ImageClassifier
from lightning_mgpu.demos.synthetic import make_synthetic_images


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, accelerator="cpu", rounds=9, steps=20, warmup=5, batch_size=32, width=16, threads=1)
    p.add_argument("--image-size", default=16, type=int)
    # Internal: one DDP measurement in processes launched by Lightning.
    p.add_argument("--worker", default=None, choices=("ddp",), help=argparse.SUPPRESS)
    p.add_argument("--devices", default=1, type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


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
        torch.cuda.init()  # before any other CUDA call, reset_peak_memory_stats raises "Invalid device argument"
        for i in range(devices):
            torch.cuda.reset_peak_memory_stats(i)
    clock = step_clock(torch.device("cuda") if gpu else None)  # the current device, as Lightning sets it
    trainer = quiet_trainer(
        strategy=strategy,
        accelerator=args.accelerator,
        devices=devices,
        max_steps=args.warmup + args.steps,
        callbacks=[clock],
    )
    # dp splits one loader batch across its devices: per-device batch x devices.
    batch = args.batch_size * (trainer.num_devices if strategy == "dp" else 1)
    trainer.fit(make_model(args), train_dataloaders=make_loader(args, batch))
    peaks = [torch.cuda.max_memory_allocated(i) for i in range(devices)] if gpu else []
    return median_duration(clock.marks, clock.ends, args.warmup), peaks


def torch_run(args: argparse.Namespace) -> float:
    """The bare model in a hand-written loop on the same device."""
    device = torch.device("cuda", 0) if args.accelerator == "gpu" else torch.device("cpu")
    model = make_model(args).to(device)
    step = train_step(model, model.configure_optimizers(), F.cross_entropy)
    # Each step alone, the batch already on the device: as the Lightning arms' batch-start-to-end clock.
    times = [timed(partial(step, x.to(device), y.to(device)), device) for x, y in make_loader(args, args.batch_size)]
    return statistics.median(times[args.warmup :])


def ddp_run(args: argparse.Namespace, devices: int) -> tuple[float, list[int]]:
    """One DDP fit in fresh processes; returns rank 0's median step seconds and every rank's peak memory."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cmd = [
            sys.executable,
            "-m",
            __spec__.name,
            "--worker",
            "ddp",
            "--devices",
            str(devices),
            "--out",
            str(out),
            "--accelerator",
            "gpu",
        ]
        cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size)]
        cmd += ["--width", str(args.width), "--image-size", str(args.image_size)]
        subprocess.run(cmd, check=True, timeout=600, cwd=REPO_ROOT, env=repo_env())
        ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    return ranks[0]["step_seconds"], [r["peak_bytes"] for r in ranks]


def ddp_worker(args: argparse.Namespace) -> None:
    clock = step_clock(torch.device("cuda"))  # the current device: this rank's, once Lightning has set it
    trainer = quiet_trainer(
        strategy="ddp", accelerator="gpu", devices=args.devices, max_steps=args.warmup + args.steps, callbacks=[clock]
    )
    trainer.fit(
        make_model(args), train_dataloaders=make_loader(args, args.batch_size)
    )  # per rank: the same per-GPU batch as dp's split
    rank = trainer.global_rank
    result = {
        "step_seconds": median_duration(clock.marks, clock.ends, args.warmup),
        "peak_bytes": torch.cuda.max_memory_allocated(),
    }
    (args.out / f"rank{rank}.json").write_text(json.dumps(result))


def ms(results: dict[str, float]) -> str:
    return ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in results.items())


def single_device(args: argparse.Namespace) -> dict[str, list[float]]:
    return interleave(
        {
            "dp": lambda: lightning_run(args, "dp", 1)[0],
            "lightning": lambda: lightning_run(args, "auto", 1)[0],
            "torch": lambda: torch_run(args),
        },
        args.rounds,
        describe=ms,
    )


def multi_gpu(args: argparse.Namespace, n: int) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """dp and ddp on ``n`` GPUs: step times per round, and the last round's peak memory per GPU of each."""
    rounds = interleave(
        {"dp": lambda: lightning_run(args, "dp", n), "ddp": lambda: ddp_run(args, n)},
        args.rounds,
        describe=lambda r: ms({arm: seconds for arm, (seconds, _) in r.items()}),
    )
    return {arm: [seconds for seconds, _ in runs] for arm, runs in rounds.items()}, {
        arm: runs[-1][1] for arm, runs in rounds.items()
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.worker == "ddp":
        ddp_worker(args)
        return
    if args.accelerator == "gpu" and not torch.cuda.is_available():
        raise SystemExit("--accelerator gpu needs CUDA; run on the CPU with the default --accelerator cpu.")
    pl.seed_everything(0, verbose=False)
    arms = {k: {"step_s": v} for k, v in single_device(args).items()}
    ratios = [
        ratio("dp / bare LightningModule (1 device)", "dp", "lightning", goal=1.02),
        ratio("dp / raw torch loop (1 device)", "dp", "torch"),
    ]
    figures, memory = {}, {}
    n = torch.cuda.device_count() if args.accelerator == "gpu" else 0
    if n >= 2:
        times, peaks = multi_gpu(args, n)
        arms |= {f"{k}_{n}gpu": {"step_s": v} for k, v in times.items()}
        ratios.append(ratio(f"dp / ddp step time ({n} GPUs)", f"dp_{n}gpu", f"ddp_{n}gpu"))
        # GPU 0 holds the module, the optimizer state and the gathered outputs; the others only replicas and
        # activations.
        figures[f"dp: GPU 0's peak memory / the mean of the other {n - 1}"] = figure(
            peaks["dp"][0] / (sum(peaks["dp"][1:]) / (n - 1))
        )
        memory = {f"{k}_{n}gpu": v for k, v in peaks.items()}
    write_result(
        args.result,
        name="dp",
        arms=arms,
        ratios=ratios,
        figures=figures,
        memory=memory,
        memory_label="peak memory per GPU",
        config=config(args, "accelerator", "rounds", "steps", "warmup", "batch_size", "width", "image_size", "threads")
        | {"device": torch.cuda.get_device_name(0) if args.accelerator == "gpu" else "cpu"},
    )


if __name__ == "__main__":
    main(sys.argv[1:])
