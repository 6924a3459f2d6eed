"""The starved GPU, end to end: JPEG decoding in ``__getitem__`` against the same data preprocessed once into the cache.

The story the guides tell, measured: a model that keeps the GPU busy (ResNet-50 in bf16-mixed) reads images whose
``__getitem__`` does real CPU work (decode a JPEG, resize it with antialiasing, crop and flip at random), through a
``DataLoader`` with a few workers, as most training scripts do. ``GPUUtilizationMonitor`` watches both runs:

1. **raw**: the dataset as it is. The monitor should call it ``input-bound``: the GPU waits for the workers.
2. **cached**: ``lightning_mgpu.data.preprocess`` decodes and resizes every image once, in parallel, into a shard
   cache (uint8, 256x256); training reads it through ``PreprocessedDataset`` with the random crop and flip as its
   ``augment`` (microseconds). Same model, loader settings and steps.

Figures: each run's verdict, GPU utilisation, data-wait share and samples/s (the monitor's, and the step clock's),
the preprocessing's one-time seconds, the CPU cost of one ``__getitem__``, and each run's dashboard (the per-device
time line, validation shaded) written beside the report. Goals on a GPU: the raw run is ``input-bound``; the cached
run reads >= 3x the samples/s; its utilisation is >= 80 %, or the report names what else bounds it.

Run::

    python -m benchmarks.bench_starved_gpu                        # one CUDA GPU, about 1.5 minutes on an H100
    python -m benchmarks.bench_starved_gpu --size cpu --device cpu    # the same story at CPU size (the quick suite)
    python -m benchmarks.bench_starved_gpu --runs-dir RUNS        # keep the two runs' logs (dashboard input)

The decoded images are uint8 on both sides, normalised on the device in the model's first step, as GPU pipelines do.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.harness.cli import parser
from benchmarks.harness.clock import step_clock
from benchmarks.harness.models import Trainable
from benchmarks.harness.networks import ResNet
from benchmarks.harness.result import figure, write_result
from benchmarks.harness.trainer import quiet_trainer

#: Goals on a GPU (the issue's): the cached run's samples/s over the raw run's, and its utilisation.
GOAL_SPEEDUP = 3.0
GOAL_UTIL_PCT = 80.0


@dataclass(frozen=True)
class Size:
    """One size of the story: the images, the model, the loader and the run length."""

    samples: int  # images in the epoch
    distinct: int  # distinct JPEGs among them, cycled (making them costs more than decoding them)
    source: int  # the JPEG's side in pixels
    resized: int  # the side after resizing (what the cache holds)
    crop: int  # the random crop the model sees
    batch_size: int
    workers: int  # DataLoader workers, in both runs
    steps: int  # training batches per run
    warmup: int  # batches before the clock counts (workers starting, cuDNN's autotuner)
    layers: tuple[int, ...]  # the ResNet's bottleneck units per stage
    width: int


SIZES = {
    # ResNet-50 on 224x224 crops of 256x256 images decoded from 640x640 JPEGs (about 5 ms of CPU each, as an ImageNet
    # photo's decode and RandomResizedCrop take); 4 workers, as many scripts have.
    "gpu": Size(2048, 256, 640, 256, 224, 128, 4, 100, 10, (3, 4, 6, 3), 64),
    # The same story in seconds on two cores: a small ResNet, small images, one worker.
    "cpu": Size(256, 64, 192, 40, 32, 16, 1, 30, 4, (1, 1), 16),
}


def make_jpegs(count: int, side: int, seed: int = 0) -> list[bytes]:
    """``count`` JPEGs of smooth random pictures (blurred noise plus gradients: they compress and decode like
    photos)."""
    from PIL import Image, ImageFilter

    rng = np.random.default_rng(seed)
    out = []
    ramp = np.linspace(0, 255, side, dtype=np.float32)
    for _ in range(count):
        noise = rng.integers(0, 256, (side // 8, side // 8, 3), dtype=np.uint8)
        img = Image.fromarray(noise).resize((side, side), Image.BICUBIC).filter(ImageFilter.GaussianBlur(2))
        pixels = np.asarray(img, dtype=np.float32) * 0.7 + ramp[None, :, None] * 0.3
        buf = io.BytesIO()
        Image.fromarray(pixels.astype(np.uint8)).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def decode_resize(jpeg: bytes, side: int) -> np.ndarray:
    """Decode a JPEG and resize it to ``side`` x ``side`` with antialiasing: uint8, channels first."""
    from PIL import Image

    img = Image.open(io.BytesIO(jpeg)).convert("RGB").resize((side, side), Image.LANCZOS)
    return np.ascontiguousarray(np.asarray(img).transpose(2, 0, 1))


def random_crop_flip(image: np.ndarray, crop: int, rng: np.random.Generator) -> np.ndarray:
    """A random ``crop`` x ``crop`` window, flipped left-right half of the time."""
    top, left = rng.integers(0, image.shape[1] - crop + 1, 2)
    out = image[:, top : top + crop, left : left + crop]
    return np.ascontiguousarray(out[:, :, ::-1] if rng.random() < 0.5 else out)


class JpegImages(Dataset):
    """Labelled JPEGs decoded, resized, cropped and flipped in ``__getitem__``: the CPU work that starves a GPU."""

    def __init__(self, jpegs: list[bytes], size: Size) -> None:
        self.jpegs, self.size = jpegs, size
        self.rng = np.random.default_rng()

    def __len__(self) -> int:
        return self.size.samples

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image = decode_resize(self.jpegs[i % len(self.jpegs)], self.size.resized)
        return torch.from_numpy(random_crop_flip(image, self.size.crop, self.rng)), i % 1000


class DecodedImages(Dataset):
    """The deterministic half of :class:`JpegImages` (decode and resize): what ``preprocess`` caches."""

    def __init__(self, jpegs: list[bytes], size: Size) -> None:
        self.jpegs, self.size = jpegs, size

    def __len__(self) -> int:
        return self.size.samples

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"image": decode_resize(self.jpegs[i % len(self.jpegs)], self.size.resized), "label": np.int64(i % 1000)}


class CropFlip:
    """The random half, as ``PreprocessedDataset``'s ``augment``: a picklable callable for the loader's workers."""

    def __init__(self, crop: int) -> None:
        self.crop, self.rng = crop, np.random.default_rng()

    def __call__(self, sample: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        image = random_crop_flip(sample["image"].numpy(), self.crop, self.rng)
        return torch.from_numpy(image), sample["label"]


class Classifier(Trainable):
    """ResNet on uint8 images, normalised on the device; validates on a few batches so the time line has its phases."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(self.net(normalise(batch[0])), batch[1])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.loss(self.net(normalise(batch[0])), batch[1]))


def normalise(images: torch.Tensor) -> torch.Tensor:
    return (images.float() - 127.5) / 64.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--size", default="gpu", choices=tuple(SIZES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers in both runs (default: the size's)")
    p.add_argument("--steps", type=int, default=None, help="training batches per run (default: the size's)")
    p.add_argument(
        "--runs-dir",
        type=Path,
        default=os.environ.get("BENCHMARK_ARTEFACTS") or None,
        help="keep both runs' logs and dashboards here (default under the suite: the report's folder)",
    )
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda needs a CUDA GPU; run with --size cpu --device cpu for the CPU-sized story.")
    return args


def per_item_seconds(dataset: Dataset, count: int = 32) -> float:
    """The median seconds of one ``dataset[i]`` in this process: the CPU work a worker does per sample."""
    times = []
    for i in range(count):
        start = time.perf_counter()
        dataset[i]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def validation_clock() -> Any:
    """A Lightning callback timing the validations (``seconds_between(start, end)``: their wall time inside that
    window); built on call, as ``harness.clock.step_clock`` is."""
    import lightning.pytorch as pl

    class ValidationClock(pl.Callback):
        def __init__(self) -> None:
            self.spans: list[tuple[float, float]] = []

        def on_validation_start(self, *_: Any) -> None:
            self.spans.append((time.perf_counter(), float("nan")))

        def on_validation_end(self, *_: Any) -> None:
            self.spans[-1] = (self.spans[-1][0], time.perf_counter())

        def seconds_between(self, start: float, end: float) -> float:
            # Clipped to the window: the last validation runs after the last training batch has ended.
            finished = [(a, b) for a, b in self.spans if not math.isnan(b)]  # NaN: the fit stopped inside it
            return sum(max(0.0, min(b, end) - max(a, start)) for a, b in finished)

    return ValidationClock()


def train(name: str, dataset: Dataset, size: Size, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One run under the monitor; its verdict, utilisation, data wait and samples/s."""
    from lightning.pytorch.loggers import CSVLogger

    from lightning_mgpu.callbacks import GPUUtilizationMonitor

    steps, workers = args.steps or size.steps, size.workers if args.workers is None else args.workers
    loader = DataLoader(
        dataset,
        batch_size=size.batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=args.device == "cuda",
        persistent_workers=workers > 0,
        drop_last=True,
    )
    clock, validation = step_clock(torch.device(args.device)), validation_clock()
    warmup = min(size.warmup, steps // 2)
    # Polls every 0.2 s and a window every 10 steps: the cached run is short, and its time line should still show it.
    monitor = GPUUtilizationMonitor(log_every_n_steps=10, sample_interval_s=0.2)
    model = Classifier(ResNet(size.layers, size.width), optimizer=lambda p: torch.optim.AdamW(p, lr=1e-4))
    trainer = quiet_trainer(
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        precision="bf16-mixed",
        max_steps=steps,
        callbacks=[clock, validation, monitor],
        logger=CSVLogger(root, name=name),
        log_every_n_steps=10,
        # Two short validations in the run, counted in training batches across epochs: the dashboard shades them on
        # the time line.
        val_check_interval=steps // 2,
        check_val_every_n_epoch=None,
        limit_val_batches=3,
        num_sanity_val_steps=0,
    )
    val = DataLoader(dataset, batch_size=size.batch_size, num_workers=workers, drop_last=True)
    trainer.fit(model, loader, val)
    # The clock's samples/s over the training batches after the warm-up, the validations inside that window taken out
    # (the last one runs after the last batch: counting it made the figure negative on a short CPU run).
    start, end = clock.marks[warmup], clock.ends[-1]
    timed = end - start - validation.seconds_between(start, end)
    diagnosis = monitor.last_diagnosis[0]
    evidence = diagnosis.evidence
    return {
        "verdict": diagnosis.verdict,
        "advice": diagnosis.advice,
        "util_pct": evidence.get("gpu_util_pct", evidence.get("cpu_util_pct", float("nan"))),
        "data_wait_pct": evidence.get("data_wait_pct", float("nan")),
        "monitor_samples_per_s": evidence.get("samples_per_sec", float("nan")),
        "samples_per_s": size.batch_size * (len(clock.ends) - warmup) / timed,
        "log_dir": trainer.log_dir,
    }


def dashboards(runs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each run's dashboard (HTML and the charts as PNG), where plotly and matplotlib are installed."""
    import importlib.util

    if importlib.util.find_spec("plotly") is None:
        return {}
    from lightning_mgpu.dashboard.render import render_dashboard

    return {name: str(render_dashboard(run["log_dir"]).html) for name, run in runs.items()}


def main(argv: list[str] | None = None) -> None:
    from lightning_mgpu.data import PreprocessedDataset, preprocess

    args = parse_args(argv)
    size = SIZES[args.size]
    torch.backends.cudnn.benchmark = True
    root = Path(args.runs_dir) if args.runs_dir else Path(tempfile.mkdtemp(prefix="bench_starved_gpu_"))
    root.mkdir(parents=True, exist_ok=True)
    jpegs = make_jpegs(size.distinct, size.source)
    raw_set = JpegImages(jpegs, size)
    item_s = per_item_seconds(raw_set)
    print(f"round 0/3: one __getitem__ takes {item_s * 1e3:.2f} ms of CPU", flush=True)

    runs = {"raw": train("raw", raw_set, size, args, root)}
    print("round 1/3", flush=True)
    cache = root / "cache"
    shutil.rmtree(cache, ignore_errors=True)  # the one-time cost is part of the figures: never a reused cache
    info = preprocess(DecodedImages(jpegs, size), cache, progress=False)
    print("round 2/3", flush=True)
    runs["cached"] = train("cached", PreprocessedDataset(cache, augment=CropFlip(size.crop)), size, args, root)
    print("round 3/3", flush=True)
    pages = dashboards(runs)
    speedup = runs["cached"]["samples_per_s"] / runs["raw"]["samples_per_s"]
    gpu = args.device == "cuda"
    figures = {
        "raw: input-bound (1 = the monitor says so)": figure(
            float(runs["raw"]["verdict"] == "input-bound"), goal=1.0 if gpu else None, higher_is_better=True
        ),
        "cached / raw samples/s": figure(round(speedup, 2), goal=GOAL_SPEEDUP if gpu else None, higher_is_better=True),
        "one __getitem__ of the raw dataset, ms of CPU": figure(round(item_s * 1e3, 2)),
        "preprocess once (decode + resize every image), s": figure(round(info.seconds, 2)),
    }
    for name, run in runs.items():
        goal = GOAL_UTIL_PCT if gpu and name == "cached" else None
        figures[f"{name}: utilisation %"] = figure(round(run["util_pct"], 1), goal=goal, higher_is_better=True)
        figures[f"{name}: data wait %"] = figure(round(run["data_wait_pct"], 1))
        figures[f"{name}: samples/s (step clock)"] = figure(round(run["samples_per_s"], 1), higher_is_better=True)
        figures[f"{name}: samples/s (monitor)"] = figure(round(run["monitor_samples_per_s"], 1), higher_is_better=True)
    notes = [f"{name}: the monitor says {run['verdict']}: {' '.join(run['advice'][:1])}" for name, run in runs.items()]
    if gpu and runs["cached"]["util_pct"] < GOAL_UTIL_PCT:
        notes.append(
            f"cached: utilisation {runs['cached']['util_pct']:.0f} % is under {GOAL_UTIL_PCT:.0f} %; the monitor's"
            f" verdict names what bounds it: {runs['cached']['verdict']}."
        )
    notes += [f"{name}'s dashboard: {page}" for name, page in pages.items()]
    write_result(
        args.result,
        name="starved_gpu",
        arms={},
        ratios=[],
        figures=figures,
        config={
            "device": torch.cuda.get_device_name(0) if gpu else "cpu",
            "size": args.size,
            "images": f"{size.samples} JPEGs ({size.distinct} distinct) of {size.source}x{size.source}, resized to"
            f" {size.resized}, crops of {size.crop}",
            "model": f"ResNet{size.layers}x{size.width}, bf16-mixed, AdamW",
            "batch_size": size.batch_size,
            "workers": size.workers if args.workers is None else args.workers,
            "steps": args.steps or size.steps,
            "cpus": os.cpu_count(),
            "verdicts": {name: run["verdict"] for name, run in runs.items()},
            "runs_dir": str(root),
        },
        notes=notes,
    )
    shutil.rmtree(cache, ignore_errors=True)  # hundreds of MB at GPU size: the runs' logs are what is kept
    if args.runs_dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
