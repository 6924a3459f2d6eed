"""Scaling: throughput at N devices against N times one device, per strategy (weak scaling: a fixed batch per device).

Every round launches, for each device count N (1, 2, ... up to what is here; the order alternates from round to round),
N ranks under an external launch (``LOCAL_RANK``/``WORLD_SIZE`` set, as torchrun does) that fit ``ddp`` and then
``sharded`` (the order rotates), and on GPUs also one process that fits ``dp`` over N devices. A run's figure is its
slowest rank's median step. Throughput is N x batch / step, and the efficiency at N is (step at 1) / (step at N):
1.0 is linear scaling, and what is missing is communication and contention. Each strategy is compared with itself at
one device, so the figure is its scaling, not its overhead (``bench_ddp.py``, ``bench_sharded.py`` and ``bench_dp.py``
measure that against their raw loops).

    $ python -m benchmarks.bench_scaling                         # CPU: 1 and 2 processes, one thread each, gloo
    $ python -m benchmarks.bench_scaling --accelerator gpu       # 1, 2, 4, ... GPUs: ddp, sharded (NCCL) and dp

On a CPU the ranks are processes of one thread each on cores of their own (two on this project's machines), so the
figure is gloo's all-reduce against the step, not a GPU fleet's: it tests the benchmark and shows where
communication starts to count. ``horovod`` is not here: it runs under horovodrun, and ``bench_horovod.py`` compares it
with ``ddp`` at two workers.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from pathlib import Path

from benchmarks.harness import ProcessFailure, finish_rank, run_ranks
from benchmarks.harness.cli import config, parser
from benchmarks.harness.result import progress, ratio, write_result
from benchmarks.harness.stats import median_interval

RANKED = ("ddp", "sharded")  # one process per device
SINGLE = ("dp",)  # one process driving every device (GPU only)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, accelerator="cpu", rounds=5, steps=20, warmup=3, batch_size=64, hidden=1024, threads=1)
    p.add_argument(
        "--counts",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="device counts, e.g. 1,2,4 (default: 1, 2, 4, ... up to the GPUs here; 1,2 on CPU)",
    )
    p.add_argument(
        "--strategies",
        type=lambda s: [x for x in s.split(",") if x],
        default=None,
        help="comma-separated, from ddp, sharded, dp (default: all that apply here)",
    )
    p.add_argument(
        "--launch-timeout", type=float, default=600.0, help="seconds one launch may take before it is killed"
    )
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-strategies", default="", help=argparse.SUPPRESS)
    p.add_argument("--worker-devices", type=int, default=1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def fit(args: argparse.Namespace, strategy: str, devices: int) -> float:
    """One Lightning fit; the median step of this process (its device's work included)."""
    import torch
    from torch.utils.data import DataLoader

    from benchmarks.bench_ddp import build_model  # bench_ddp's decomposition of this model explains this one's figure
    from benchmarks.harness.models import Trainable, random_data
    from benchmarks.harness.trainer import timed_fit

    rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", rank) if args.accelerator == "gpu" else torch.device("cpu")
    # dp splits one batch over its devices: N x the per-device batch keeps the work per device fixed.
    batch = args.batch_size * (devices if strategy in SINGLE else 1)
    data = random_data(batch * (args.warmup + args.steps + 2), 256, classes=10, seed=1 + rank)  # each rank its own data
    clock = timed_fit(
        Trainable(build_model(args.hidden)),
        DataLoader(data, batch_size=batch),
        warmup=args.warmup,
        steps=args.steps,
        device=device,
        strategy=strategy,
        accelerator=args.accelerator,
        devices=devices,
        use_distributed_sampler=False,
    )
    return median_interval(clock.marks, args.warmup, args.steps)


def worker(args: argparse.Namespace) -> None:
    """One launched process: fits each of ``--worker-strategies`` in turn and writes its median steps."""
    import torch

    if args.accelerator == "cpu":
        torch.set_num_threads(args.threads)
    finish_rank(
        args.worker_out, {name: fit(args, name, args.worker_devices) for name in args.worker_strategies.split(",")}
    )


def launch(
    args: argparse.Namespace, argv: list[str], strategies: list[str], devices: int, ranks: int
) -> dict[str, float]:
    """Start ``ranks`` processes that fit ``strategies`` on ``devices`` devices; the slowest rank's step per strategy.

    Raises:
        ProcessFailure: a rank failed or the launch ran past ``--launch-timeout`` (every rank is killed; the message
            carries the failing rank's last lines).
    """
    per_rank = run_ranks(
        __spec__.name,
        [*argv, "--worker-strategies", ",".join(strategies), "--worker-devices", str(devices)],
        ranks,
        timeout=args.launch_timeout,
        rendezvous=ranks > 1 or strategies[0] in RANKED,  # dp alone needs none
        what=f"{','.join(strategies)} on {devices} device(s)",
        capture_rank0=True,
    )
    return {name: max(steps[name] for steps in per_rank) for name in strategies}  # ranks step in lockstep


def default_counts(accelerator: str) -> list[int]:
    if accelerator == "cpu":
        return [1, 2]
    import torch

    return [2**i for i in range(torch.cuda.device_count().bit_length())]  # 1, 2, 4, ... up to the GPUs here


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker_out is not None:
        worker(args)
        return
    counts = args.counts or default_counts(args.accelerator)
    if not counts or counts[0] != 1:
        raise SystemExit(
            f"bench_scaling: the counts must start at 1 (the baseline each strategy is compared with), got {counts}"
        )
    if args.accelerator == "gpu":
        import torch

        if torch.cuda.device_count() < max(counts):
            raise SystemExit(
                f"bench_scaling: --counts {counts} needs {max(counts)} GPUs, {torch.cuda.device_count()} here"
            )
    wanted = args.strategies or [*RANKED, *(SINGLE if args.accelerator == "gpu" else ())]
    unknown = sorted(set(wanted) - {*RANKED, *SINGLE})
    if unknown:
        raise SystemExit(f"bench_scaling: unknown strategies {unknown}; choose from {[*RANKED, *SINGLE]}")
    if "dp" in wanted and args.accelerator != "gpu":
        raise SystemExit(
            "bench_scaling: dp drives several GPUs from one process; on CPU it has one device. Drop dp or use"
            " --accelerator gpu."
        )
    failed: dict[str, str] = {}
    if "sharded" in wanted and importlib.util.find_spec("fairscale") is None:
        failed |= {f"sharded@{n}": "needs fairscale (pip install 'lightning_mgpu[sharded]')" for n in counts}
    ranked = [s for s in wanted if s in RANKED and f"{s}@1" not in failed]
    single = [s for s in wanted if s in SINGLE]
    times: dict[str, list[float | None]] = {f"{s}@{n}": [] for s in (*ranked, *single) for n in counts}
    for r in range(args.rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            groups = []
            live = [s for s in ranked if f"{s}@{n}" not in failed]
            if live:
                shift = r % len(live)
                groups.append((live[shift:] + live[:shift], n))  # rotated: no strategy always first
            groups += [([s], 1) for s in single if f"{s}@{n}" not in failed]
            for strategies, ranks in groups:
                try:
                    steps = launch(args, argv, strategies, n, ranks)
                except ProcessFailure as err:
                    failed |= {f"{s}@{n}": str(err) for s in strategies}
                    steps = {}
                for s in strategies:
                    times[f"{s}@{n}"].append(steps.get(s))
        progress(r + 1, args.rounds)
    arms = {arm: {"step_s": values} for arm, values in times.items() if arm not in failed}
    ratios, throughput = [], {}
    for s in wanted:  # a failed arm's ratios stay, reported as failed with its error
        for n in counts[1:]:
            ratios.append(
                ratio(
                    f"{s}: scaling efficiency at {n} devices (step at 1 / step at {n})",
                    f"{s}@1",
                    f"{s}@{n}",
                    higher_is_better=True,
                )
            )
    for s in (*ranked, *single):
        rows = {
            n: [args.batch_size * n / t for t in times[f"{s}@{n}"] if t] for n in counts if f"{s}@{n}" not in failed
        }
        throughput[s] = {str(n): v for n, v in rows.items() if v}
    for s, per_n in throughput.items():
        line = ", ".join(f"{n}: {statistics.median(v):.0f}" for n, v in per_n.items())
        print(f"bench_scaling: {s} samples/s by device count: {line}")
    for arm, err in failed.items():
        print(f"bench_scaling: {arm} failed: {err.splitlines()[0]}")
    write_result(
        args.result,
        name="scaling",
        arms=arms,
        ratios=ratios,
        failed=failed,
        config=config(args) | {"counts": counts, "strategies": [*ranked, *single]},
        notes=[
            "Weak scaling: the batch per device is fixed, so N devices do N times the work of one; efficiency 1.0 is"
            " linear. A strategy is compared with itself at one device."
        ],
        scaling={"samples_per_s": throughput},
    )


if __name__ == "__main__":
    main()
