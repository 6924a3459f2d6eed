"""Benchmark the launchers: the same ``examples/train.py`` job under Lightning's launcher, torchrun, Ray Train and
horovodrun.

The glue the bundle adds to each launcher should cost nothing per step. Every arm runs the same job (digits, 2
processes of one thread each, batch 32 per process, ``--max-epochs E``) and reports, from its ``summary.json``:

- ``sample_s``: seconds per training sample over the fit (1 / ``train_samples_per_sec``; validation excluded),
  the steady cost, where the goal is ``<= 1.03`` x the Lightning-launched run of the same strategy;
- ``wall_s``: the whole command, start-up included (context: Ray starts a local instance, ~20 s here).

Arms (``--arms``): ``lightning`` (``--strategy ddp --devices 2``), ``torchrun`` (``torchrun --standalone
--nproc-per-node 2``), ``ray`` (``--launcher ray --ray-workers 2``, a local Ray per run), and for Horovod
``horovod`` (self-launched, 2 workers) against ``horovodrun`` (``horovodrun -np 2 --gloo``). Rounds are interleaved,
the order rotating each round; a ratio is the median of the per-round ratios.

Run::

    python -m benchmarks.bench_launchers                     # 5 rounds, about 8 minutes here
    python -m benchmarks.bench_launchers --rounds 1 --arms lightning,torchrun
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import interleave
from benchmarks.harness.cli import parser
from benchmarks.harness.ranks import REPO_ROOT as ROOT
from benchmarks.harness.ranks import repo_env
from benchmarks.harness.result import ratio, write_result

TRAIN = str(ROOT / "examples" / "train.py")
BIN = Path(sys.executable).parent
ALL_ARMS = ("lightning", "torchrun", "ray", "horovod", "horovodrun")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, rounds=5)
    p.add_argument("--epochs", default=3, type=int)
    p.add_argument("--arms", default=",".join(ALL_ARMS), help=f"comma-separated, from {','.join(ALL_ARMS)}")
    args = p.parse_args(argv)
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(args.arms) - set(ALL_ARMS))
    if unknown:
        p.error(f"unknown arm(s) {unknown}; choose from {list(ALL_ARMS)}")
    return args


def command(arm: str, out: Path, epochs: int) -> list[str]:
    job = [
        "--max-epochs",
        str(epochs),
        "--logger",
        "none",
        "--accelerator",
        "cpu",
        "--output-dir",
        str(out),
        "--no-save-on-interrupt",
    ]
    python = [sys.executable, TRAIN]
    return {
        "lightning": [*python, "--strategy", "ddp", "--devices", "2", *job],
        "torchrun": [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc-per-node",
            "2",
            TRAIN,
            "--strategy",
            "ddp",
            "--devices",
            "2",
            *job,
        ],
        "ray": [*python, "--launcher", "ray", "--ray-workers", "2", "--strategy", "ddp", *job],
        "horovod": [*python, "--strategy", "horovod", "--devices", "2", *job],
        "horovodrun": [
            str(BIN / "horovodrun"),
            "-np",
            "2",
            "--gloo",
            *python,
            "--strategy",
            "horovod",
            "--devices",
            "2",
            *job,
        ],
    }[arm]


def run_arm(arm: str, epochs: int) -> tuple[float, float]:
    """``(seconds per training sample, wall seconds)`` of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / arm
        rendezvous = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK")  # each arm's own
        env = {k: v for k, v in repo_env(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore").items() if k not in rendezvous}
        start = time.perf_counter()
        proc = subprocess.run(command(arm, out, epochs), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - start
        if proc.returncode != 0 or not (out / "summary.json").is_file():
            raise RuntimeError(f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
        rate = json.loads((out / "summary.json").read_text())["train_samples_per_sec"]
        return 1.0 / rate, wall


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    needs = {"ray": "ray.train", "horovod": "horovod", "horovodrun": "horovod"}
    arms = [a for a in args.arms if a not in needs or importlib.util.find_spec(needs[a].split(".")[0]) is not None]
    skipped = sorted(set(args.arms) - set(arms))
    failed: dict[str, str] = {}

    def run(arm: str) -> tuple[float, float] | None:
        if arm in failed:
            return None
        try:
            return run_arm(arm, args.epochs)
        except Exception as err:  # noqa: BLE001  (reported as failed, never as a number)
            failed[arm] = str(err)
            return None

    rounds = interleave({arm: (lambda arm=arm: run(arm)) for arm in arms}, args.rounds)
    results = {
        arm: {"sample_s": [r[0] for r in v], "wall_s": [r[1] for r in v]}
        for arm, v in rounds.items()
        if arm not in failed
    }  # type: ignore[index]
    ratios = []
    for num, den in (("torchrun", "lightning"), ("ray", "lightning"), ("horovodrun", "horovod")):
        if num in args.arms and den in args.arms:
            ratios.append(ratio(f"{num} / {den}: seconds per training sample", num, den, metric="sample_s", goal=1.03))
            ratios.append(ratio(f"{num} / {den}: wall time, start-up included", num, den, metric="wall_s"))
    write_result(
        args.result,
        name="launchers",
        unit="s/sample",
        arms=results,
        ratios=ratios,
        failed=failed,
        config={
            "rounds": args.rounds,
            "epochs": args.epochs,
            "arms": args.arms,
            "processes": 2,
            "threads_per_process": 1,
        },
        notes=[f"skipped (not installed): {', '.join(skipped)}"] if skipped else [],
    )


if __name__ == "__main__":
    main()
