"""Training throughput of every strategy, side by side, through examples/train.py.

Each round runs every strategy once, in a rotated order, so drifting machine load hits all of
them alike; the report is the median samples/s per strategy and its ratio to ``ddp``. The
throughput excludes start-up and validation (it is train.py's ``train_samples_per_sec``).

    python benchmarks/compare_strategies.py                       # CPU, 2 processes, synthetic data
    python benchmarks/compare_strategies.py --accelerator gpu --devices 4 --rounds 5
    python benchmarks/compare_strategies.py --strategies ddp sharded --precision bf16-mixed
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[1] / "examples" / "train.py"


def run_once(strategy: str, args: argparse.Namespace, out: Path) -> float:
    cmd = [
        sys.executable, str(TRAIN), "--strategy", strategy, "--accelerator", args.accelerator, "--devices", str(args.devices),
        "--data", "synthetic", "--batch-size", str(args.batch_size), "--max-epochs", "1", "--max-steps", str(args.steps),
        "--precision", args.precision, "--logger", "none", "--output-dir", str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{strategy} failed:\n{proc.stderr[-3000:]}")
    return float(json.loads((out / "summary.json").read_text())["train_samples_per_sec"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategies", nargs="+", default=["ddp", "ddp_spawn", "dp", "sharded", "horovod"])
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--devices", default=2, type=int)
    p.add_argument("--batch-size", default=64, type=int)
    p.add_argument("--steps", default=30, type=int)
    p.add_argument("--precision", default="32-true")
    p.add_argument("--rounds", default=3, type=int)
    p.add_argument("--timeout", default=600, type=int)
    args = p.parse_args()
    rates: dict[str, list[float]] = {s: [] for s in args.strategies}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = args.strategies[r % len(args.strategies):] + args.strategies[: r % len(args.strategies)]
            for strategy in order:
                rates[strategy].append(run_once(strategy, args, Path(tmp) / f"{strategy}-{r}"))
                print(f"round {r} {strategy:<14} {rates[strategy][-1]:9.1f} samples/s", flush=True)
    base = statistics.median(rates["ddp"]) if "ddp" in rates else None
    print(f"\n{'strategy':<14} {'median samples/s':>17} {'vs ddp':>8}   (devices={args.devices}, {args.accelerator}, batch {args.batch_size}/device)")
    for strategy, values in rates.items():
        med = statistics.median(values)
        ratio = f"{med / base:8.3f}" if base else "       -"
        print(f"{strategy:<14} {med:17.1f} {ratio}")
    print("\nNote: on CPU, dp runs on a single device (DataParallel needs CUDA for several devices), so it is not comparable there.")


if __name__ == "__main__":
    main()
