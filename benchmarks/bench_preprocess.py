"""Preprocessing throughput of every backend against litdata and Hugging Face datasets, and cached vs on-the-fly epoch
time.

Side by side in one run, on the digits training split with the example transform
(``DigitsFeatures``, a few ms per sample in numpy):

1. Throughput of ``preprocess`` with ``serial``, ``processes`` and ``ray``, and of
   ``litdata.optimize`` (default ``spawn`` workers, and ``start_method="fork"``) on the same
   samples and transform, and of Hugging Face ``datasets``' ``Dataset.map(num_proc=...)`` followed by
   ``save_to_disk`` (each skipped with a message if not installed). Rounds are
   interleaved (the order rotates); each round's ratio to that round's ``serial`` is taken, and
   the median of those paired ratios is reported (and the best round's, the least disturbed
   by other jobs on a shared machine). Start-up costs are printed separately: the one-time
   first call (``ray.init``, the forkserver's imports, Ray workers importing torch) and the
   cost every call pays (a 64-sample call after the warm-up: fingerprinting, sending the kept
   workers the dataset, the manifest). litdata and ``datasets`` start fresh workers on every call,
   so their start-up is part of each of their rounds, as in normal use.
2. One training epoch of ``ImageClassifier`` with the transform applied on the fly in
   ``__getitem__`` against one epoch read from the cache (interleaved, median).
3. Cold calls, the one that counts (users preprocess once): each call runs in a fresh interpreter
   that has imported torch and Lightning, as a user's script has, and only the ``preprocess`` call
   is timed. Arms: ``serial``, ``processes`` (the default start method: forked workers where that
   is safe) and ``processes`` with ``start_method="forkserver"`` (what a process with threads
   gets), on 400 and 2000 samples of a heavier transform (``DigitsFeatures(upsample=80)``, about
   3.5 ms per sample). Goals: never slower than serial; 2000 samples >= 1.7x serial on 2 cores.

Goals: parallel speedup over serial >= 0.8 x cores; throughput >= litdata's; cached epoch
>= 5x faster than on the fly. On a shared machine the numbers are noisy: a serial run needs one
free core, a parallel run all of them, so other jobs depress the speedups; the benchmark prints
the parallelism the machine offered each round (2 processes of pure transform against 1).

    python -m benchmarks.bench_preprocess                      # about 6-7 minutes on 2 cores
    python -m benchmarks.bench_preprocess --samples 800 --repeats 3 --skip-ray --skip-epochs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.harness import interleave
from benchmarks.harness.cli import parser
from benchmarks.harness.clock import timed
from benchmarks.harness.machine import usable_cpus
from benchmarks.harness.ranks import repo_env
from benchmarks.harness.result import figure, write_result
from benchmarks.harness.result import ratio as ratio_spec
from benchmarks.harness.trainer import quiet_trainer
from lightning_mgpu.data import (
    PreprocessedDataset,
    TransformedDataset,
    preprocess,
    start_process_pool,
)
from lightning_mgpu.demos import ImageClassifier
from lightning_mgpu.demos.digits_preprocessed import DigitsFeatures, digits_splits
from lightning_mgpu.utilities.imports import is_available

TRANSFORM = DigitsFeatures()
COLD_TRANSFORM = DigitsFeatures(upsample=80)  # about 3.5 ms per sample, near the 4 ms of the figures we were given
COLD_ARMS = ("serial", "processes", "processes-forkserver")
PEERS = ("litdata", "litdata-fork", "hf-datasets")  # other libraries' parallel preprocessing, same transform
_TRAIN: TensorDataset | None = None


def _train_set() -> TensorDataset:
    global _TRAIN
    if _TRAIN is None:
        _TRAIN = digits_splits()[0]
    return _TRAIN


def litdata_fn(index: int) -> dict[str, Any]:
    """litdata's per-item function (module level, so that its spawned workers can import it)."""
    x, y = TRANSFORM(_train_set()[index])
    return {"x": x, "y": y}


def hf_fn(row: dict[str, Any]) -> dict[str, Any]:
    """``datasets.Dataset.map``'s per-row function: the same transform, into Arrow columns."""
    x, y = TRANSFORM(_train_set()[row["index"]])
    return {"x": x, "y": int(y)}


def _transform_range(bounds: tuple[int, int]) -> float:
    return timed(lambda: [TRANSFORM(_train_set()[i]) for i in range(*bounds)])


class Parallelism:
    """What the machine offers right now: ``workers`` processes transforming side by side vs one.

    On a shared machine other jobs take cores, and no backend can beat this ratio; the speedups
    above are best read against it. A fork pool is fine here: it runs numpy only.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def measure(self, k: int = 60) -> float:
        import multiprocessing

        single = _transform_range((0, k))
        # A pool per measurement, joined after it: its handler threads would otherwise make every later
        # preprocess call in this process fall back from fork to the forkserver.
        with multiprocessing.get_context("fork").Pool(self.workers) as pool:
            pool.map(_transform_range, [(0, k)] * self.workers)  # the workers' first import and page faults
            seconds = timed(lambda: pool.map(_transform_range, [(0, k)] * self.workers))
        return self.workers * single / seconds


def preprocess_arm(name: str) -> tuple[str, dict[str, Any]]:
    """``preprocess``'s backend and keyword arguments for an arm: ``serial``, ``processes``, ``processes-forkserver``
    (the shared pool a process with threads gets), ``ray``."""
    backend, _, method = name.partition("-")
    return backend, ({"start_method": method} if method else {})


def run_once(name: str, n: int, root: Path, workers: int) -> float:
    """Seconds to build a fresh cache of the first ``n`` training samples with ``name``."""
    out = root / f"{name}-{time.monotonic_ns()}"
    subset = TensorDataset(*_train_set()[:n])
    t0 = time.perf_counter()
    if name.startswith("litdata"):
        import litdata

        start_method = "fork" if name == "litdata-fork" else None
        litdata.optimize(
            fn=litdata_fn,
            inputs=list(range(n)),
            output_dir=str(out),
            num_workers=workers,
            chunk_bytes="64MB",
            verbose=False,
            start_method=start_method,
        )
    elif name == "hf-datasets":
        import datasets

        datasets.disable_progress_bars()
        mapped = datasets.Dataset.from_dict({"index": list(range(n))}).map(
            hf_fn, num_proc=workers, remove_columns=["index"]
        )
        mapped.save_to_disk(str(out))
    else:
        backend, kwargs = preprocess_arm(name)
        preprocess(
            subset,
            out,
            TRANSFORM,
            backend=backend,
            num_workers=None if name == "serial" else workers,
            progress=False,
            **kwargs,
        )  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return seconds


class CyclicDigits(torch.utils.data.Dataset):
    """``n`` samples cycling over the digits training split (1438 samples), so a cold call can take 2000."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return _train_set()[i % len(_train_set())]


def cold_child(arm: str, n: int, out: Path, workers: int) -> None:
    """One first call in this fresh interpreter (the parent's ``--cold-child``); prints its seconds as JSON."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # as in the warm rounds: serial is one core's throughput
    dataset = CyclicDigits(n)
    _train_set()  # loading the digits is the user's own start-up, not the call's
    backend, kwargs = preprocess_arm(arm)
    num_workers = None if backend == "serial" else workers
    seconds = timed(
        lambda: preprocess(
            dataset, out, COLD_TRANSFORM, backend=backend, num_workers=num_workers, progress=False, **kwargs
        )
    )  # type: ignore[arg-type]
    print(json.dumps({"seconds": seconds}))


def cold_calls(args: argparse.Namespace, root: Path) -> dict[str, list[float]]:
    """Interleaved rounds of first calls, each in a fresh interpreter; ``{f"cold{n}_{arm}": [seconds per round]}``."""

    def call(arm: str, n: int) -> float:
        out = root / f"cold-{arm}-{n}-{time.monotonic_ns()}"
        cmd = [
            sys.executable,
            "-m",
            __spec__.name,
            "--cold-child",
            arm,
            str(n),
            str(out),
            "--workers",
            str(args.workers),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=repo_env())
        if proc.returncode != 0:
            raise RuntimeError(
                f"cold call {arm} on {n} samples failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
            )
        shutil.rmtree(out, ignore_errors=True)
        return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]

    arms = {f"cold{n}_{arm}": partial(call, arm, n) for n in args.cold_samples for arm in COLD_ARMS}

    def describe(r):
        return "cold calls: " + "  ".join(f"{k}={v:.2f}s" for k, v in r.items()) + f"  (load {os.getloadavg()[0]:.1f})"

    return interleave(arms, args.cold_repeats, describe=describe)


class EpochTimer(Callback):
    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.seconds.append(time.perf_counter() - self._t0)


def epoch_seconds(dataset: Any) -> float:
    """Wall time of one training epoch (batch 32, no DataLoader workers, no validation)."""
    timer = EpochTimer()
    trainer = quiet_trainer(accelerator="cpu", devices=1, max_epochs=1, callbacks=[timer])
    model = ImageClassifier(in_channels=TRANSFORM.output_shape[0], num_classes=10)
    trainer.fit(model, DataLoader(dataset, batch_size=32, shuffle=True, num_workers=0))
    return timer.seconds[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument(
        "--samples",
        type=int,
        default=1438,
        help="training samples to preprocess (default and max: the whole split, 1438)",
    )
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds of the throughput comparison")
    p.add_argument("--epoch-repeats", type=int, default=2, help="interleaved rounds of the epoch comparison")
    p.add_argument("--workers", type=int, default=usable_cpus(), help="parallel workers (default: usable CPUs)")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="intra-op threads for the epoch comparison (1: stable on a shared machine)",
    )
    p.add_argument("--skip-ray", action="store_true")
    p.add_argument("--skip-litdata", action="store_true")
    p.add_argument(
        "--skip-litdata-fork",
        action="store_true",
        help="skip litdata with start_method='fork' (its fastest, fork-unsafe setting)",
    )
    p.add_argument("--skip-hf", action="store_true", help="skip Hugging Face datasets' map(num_proc=...)")
    p.add_argument("--skip-epochs", action="store_true")
    p.add_argument(
        "--cold-samples",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[400, 2000],
        help="sample counts of the cold-call comparison, comma-separated ('' skips it)",
    )
    p.add_argument("--cold-repeats", type=int, default=5, help="interleaved rounds of the cold-call comparison")
    p.add_argument("--cold-child", nargs=3, metavar=("ARM", "N", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.samples = max(16, min(args.samples, 1438))
    return args


def start_ray(cpus: int) -> bool:
    """``ray.init`` once, outside the timings; two tries (on an overloaded machine the raylet can
    give up on its slow dashboard agent after a hard-coded 15 s, ray-project/ray#65983)."""
    import ray

    for attempt in (1, 2):
        t0 = time.perf_counter()
        try:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        except Exception as err:  # noqa: BLE001 - reported, then the benchmark goes on without Ray
            ray.shutdown()
            print(f"ray: ray.init failed (attempt {attempt}): {err}")
            continue
        print(f"one-time: ray.init                                   {time.perf_counter() - t0:6.1f} s")
        return True
    print("ray: skipped, it could not start on this machine right now")
    return False


def throughput(args: argparse.Namespace, root: Path) -> Rounds:
    names = ["serial", "processes", "processes-forkserver"]
    optional = {  # arm: (the module it needs, whether a flag skips it, how to install the module)
        "ray": ("ray", args.skip_ray, "pip install 'lightning_mgpu[ray]'"),
        "litdata": (
            "litdata",
            args.skip_litdata,
            "pip install --no-deps litdata obstore tifffile; a plain `pip install litdata` replaces torch",
        ),
        "litdata-fork": ("litdata", args.skip_litdata or args.skip_litdata_fork, None),  # litdata's message says it
        "hf-datasets": ("datasets", args.skip_hf, "pip install datasets"),
    }
    for name, (module, skipped, install) in optional.items():
        if not skipped and is_available(module):
            names.append(name)
        elif not skipped and install:
            print(f"{name}: not installed, skipped ({install})")
    if "ray" in names and not start_ray(args.workers):
        names.remove("ray")
    if "processes-forkserver" in names:  # the shared pool, started ahead (calls shorter than its start run in-process)
        seconds = timed(lambda: start_process_pool(args.workers))
        print(f"one-time: start_process_pool() (forkserver)                    {seconds:6.2f} s")
    ours = [name for name in ("serial", "processes", "processes-forkserver", "ray") if name in names]
    for name in ours:  # warm-up: start-up costs that a long job pays once
        print(f"one-time: first {name:20s} call, 64 samples (start-up) {run_once(name, 64, root, args.workers):6.2f} s")
    for name in ours:  # what every call pays on top of its samples
        print(
            f"each call: a {name:20s} call of 64 samples after the warm-up"
            f" {run_once(name, 64, root, args.workers):6.2f} s"
        )
    parallelism = Parallelism(args.workers)
    # The machine's parallelism is measured as an arm of its own, so that it is taken in every round beside the others.
    rounds = interleave(
        {"offered": parallelism.measure}
        | {name: (lambda name=name: run_once(name, args.samples, root, args.workers)) for name in names},
        args.repeats,
        describe=lambda r: (
            "  ".join(f"{n}={args.samples / r[n]:.0f}/s" for n in names)
            + f"  (machine parallelism now: {r['offered']:.2f}x, load {os.getloadavg()[0]:.1f})"
        ),
    )
    offered = rounds.pop("offered")
    seconds = rounds
    if "ray" in names:
        import ray

        ray.shutdown()
    return Rounds(args.samples, seconds, offered)


class Rounds(NamedTuple):
    """Per-round timings (ratios are paired within a round, where the machine's load is most alike), and the
    parallelism the machine offered in each round."""

    samples: int
    seconds: dict[str, list[float]]
    offered: list[float]


def epochs(args: argparse.Namespace, root: Path) -> tuple[float, float]:
    subset = TensorDataset(*_train_set()[: args.samples])
    preprocess(subset, root / "epoch-cache", TRANSFORM, backend="processes", num_workers=args.workers, progress=False)
    cached, fly = PreprocessedDataset(root / "epoch-cache"), TransformedDataset(subset, TRANSFORM)
    rounds = interleave(
        {"on the fly": lambda: epoch_seconds(fly), "from the cache": lambda: epoch_seconds(cached)},
        args.epoch_repeats,
        describe=lambda r: "epoch: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.items()),
    )
    return statistics.median(rounds["on the fly"]), statistics.median(rounds["from the cache"])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cold_child:
        arm, n, out = args.cold_child
        cold_child(arm, int(n), Path(out), args.workers)
        return
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*isinstance.treespec, LeafSpec.*")
    torch.set_num_threads(args.torch_threads)
    # One BLAS thread in the driver, as in every worker: "serial" is then one core's throughput,
    # the baseline of a per-core speedup (OpenBLAS threads also spin on a shared machine).
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    cores = args.workers
    print(
        f"bench_preprocess: {args.samples} digits samples, DigitsFeatures -> {TRANSFORM.output_shape}, {cores} workers,"
        f" load average before: {os.getloadavg()[0]:.1f} (shared machine: expect noise)"
    )
    _ = TRANSFORM(_train_set()[0])
    per_sample = min(timed(lambda: TRANSFORM(_train_set()[i])) for i in range(20))
    print(f"transform: {per_sample * 1e3:.2f} ms/sample (best of 20)")
    with tempfile.TemporaryDirectory(prefix="bench_preprocess_") as tmp:
        root = Path(tmp)
        rates = throughput(args, root)
        fly, cached = (None, None) if args.skip_epochs else epochs(args, root)
        cold = cold_calls(args, root) if args.cold_samples and args.cold_repeats > 0 else {}

    offered = statistics.median(rates.offered)
    goal = 0.8 * cores
    cold_specs = [
        ratio_spec(
            f"cold call, {n} samples: {arm} speedup over serial",
            f"cold{n}_serial",
            f"cold{n}_{arm}",
            "seconds",
            goal=1.7 if n >= 2000 and arm == "processes" else 1.0,
            higher_is_better=True,
        )
        for n in (args.cold_samples if cold else [])
        for arm in COLD_ARMS[1:]
    ]
    specs = [
        ratio_spec(f"{n} speedup over serial", "serial", n, "seconds", goal=goal, higher_is_better=True)
        for n in ("processes", "processes-forkserver", "ray")
        if n in rates.seconds
    ]
    specs += [
        ratio_spec(f"processes throughput / {lit}", lit, "processes", "seconds", goal=1.0, higher_is_better=True)
        for lit in PEERS
        if lit in rates.seconds
    ]
    specs += cold_specs
    figures = {"machine parallelism offered (2 processes of pure compute vs 1)": figure(offered)}
    if fly is not None and cached is not None:
        figures["epoch on the fly / from the cache"] = figure(fly / cached, 5.0, higher_is_better=True)
    write_result(
        args.result,
        name="preprocess",
        unit="s per call",
        arms={n: {"seconds": v} for n, v in {**rates.seconds, **cold}.items()},
        ratios=specs,
        figures=figures,
        config={
            "samples": args.samples,
            "repeats": args.repeats,
            "workers": cores,
            "transform_ms_per_sample": round(per_sample * 1e3, 3),
            "cold_samples": args.cold_samples,
            "cold_repeats": args.cold_repeats,
            "cold_transform_upsample": COLD_TRANSFORM.upsample,
        },
        notes=[
            "Throughput rounds are warm calls (after a first call that starts the pools); the one-time start-up is"
            " printed separately.",
            "Arms cold<N>_<arm> are first calls, each in a fresh interpreter that has imported torch and Lightning;"
            " only the call is timed.",
        ],
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
