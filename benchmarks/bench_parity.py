"""Parity: every strategy's parameters after k SGD steps, against a raw torch DDP loop and one process on the global
batch.

The model, data and run are the parity tests' (``lightning_mgpu/testing/parity.py``,
``tests/integration/runners/run_parity.py``): an MLP regressor from a fixed seed, SGD with momentum, a fixed tensor
dataset read in order, so that every configuration sees the same global batches (32 samples per step; each of 2 ranks
reads 16). The raw arm is the loop of torch's DDP tutorial on the same module, data, sampler and optimizer, in 2
processes.

Figures (the max absolute difference over every parameter element after ``--steps`` steps):

- against raw DDP: strategies that all-reduce gradients in fp32 (ddp, ddp_spawn, dp, ddp2, sharded, horovod) should end
  bitwise equal or within float rounding of the reduction order (goal <= 1e-6);
- against one process on the global batch: the distributed mean of per-rank gradients is the global-batch gradient up
  to rounding, which SGD with momentum carries along (about 1e-6 after a few steps here; goal <= 1e-4).

    python -m benchmarks.bench_parity                  # about 2 minutes on 2 cores
    python -m benchmarks.bench_parity --steps 20 --strategies ddp sharded

``ddp2`` runs as a user runs it on two nodes: two torchrun agents on 127.0.0.1 (``--nnodes 2 --nproc-per-node 1``),
one process per node driving two emulated devices (threads; DataParallel's code path), so 4 devices of 8 samples
each make the same global batch of 32.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import launch_ranks
from benchmarks.harness.cli import parser
from benchmarks.harness.ranks import REPO_ROOT as REPO
from benchmarks.harness.ranks import repo_env
from benchmarks.harness.result import figure, progress, write_result

RUNNER = "tests.integration.runners.run_parity"
#: Each arm: how to run it. ``None``: the raw DDP loop of this file.
ARMS: dict[str, list[str] | None] = {
    "raw_ddp": None,
    "single": ["--strategy", "auto", "--devices", "1"],
    "ddp": ["--strategy", "ddp", "--devices", "2"],
    "ddp_spawn": ["--strategy", "ddp_spawn", "--devices", "2"],
    "dp": ["--strategy", "dp_emulated", "--devices", "2"],  # DataParallel's code path over 2 CPU "devices" (threads)
    "sharded": ["--strategy", "sharded", "--devices", "2"],
    "sharded_fsdp2": ["--strategy", "sharded_fsdp2", "--devices", "2"],
    "horovod": ["--strategy", "horovod", "--devices", "2"],
}
#: Arms launched as two nodes by two torchrun agents (one process per node): ``ddp2``'s one process per node.
TWO_NODE_ARMS = {"ddp2": ["--strategy", "ddp2_emulated", "--devices", "2", "--num-nodes", "2"]}
ARMS.update(TWO_NODE_ARMS)
NEEDS = {"sharded": "fairscale", "horovod": "horovod"}
GOAL_VS_RAW = 1e-6
GOAL_VS_SINGLE = 1e-4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--steps", type=int, default=10, help="SGD steps")
    p.add_argument(
        "--strategies",
        nargs="*",
        default=[a for a in ARMS if a not in ("raw_ddp", "single")],
        help="arms besides raw_ddp and single",
    )
    p.add_argument("--raw-worker", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def raw_worker(args: argparse.Namespace) -> None:
    """One rank of the raw loop (torch's DDP tutorial), launched by :func:`run_raw` with the rendezvous in the env."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    from lightning_mgpu.testing.parity import ParityModule, make_data

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    module = ParityModule(global_batch=32, num_samples=32 * args.steps)  # the seeded init, nothing of Lightning used
    model = DistributedDataParallel(module.net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = make_data(32 * args.steps)
    loader = DataLoader(data, batch_size=32 // world, sampler=DistributedSampler(data, world, rank, shuffle=False))
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    torch.save(
        {f"net.{k}": v.detach().cpu() for k, v in module.net.state_dict().items()},
        args.raw_worker / f"params_rank{rank}.pt",
    )
    dist.destroy_process_group()


def run_raw(args: argparse.Namespace, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    launch_ranks(
        ["-m", __spec__.name, "--steps", str(args.steps), "--raw-worker", str(out)],
        2,
        timeout=300,
        what="raw DDP",
        capture_rank0=True,
    )


def run_arm(extra: list[str], steps: int, out: Path) -> None:
    env = repo_env(OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", RUNNER, *extra, "--steps", str(steps), "--global-batch", "32", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(
            f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}"
        )


def run_two_nodes(extra: list[str], steps: int, out: Path) -> None:
    """Two torchrun agents, node ranks 0 and 1, meeting at a free port on 127.0.0.1."""
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    env = repo_env(OMP_NUM_THREADS="1")
    port = str(find_free_network_port())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                port,
                "-m",
                RUNNER,
                *extra,
                "--steps",
                str(steps),
                "--global-batch",
                "32",
                "--out",
                str(out),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    try:
        logs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, log in zip(procs, logs):
        if p.returncode != 0:
            raise RuntimeError(f"a node exited {p.returncode}: {log.strip().splitlines()[-1] if log.strip() else ''}")


def load_params(out: Path) -> list[dict[str, Any]]:
    import torch

    files = sorted(out.glob("params_rank*.pt"))
    if not files:
        raise RuntimeError(f"no parameters written in {out}")
    return [torch.load(f) for f in files]


def max_abs_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    if a.keys() != b.keys():
        raise RuntimeError(f"parameter names differ: {sorted(set(a) ^ set(b))}")
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.raw_worker is not None:
        raw_worker(args)
        return
    from lightning_mgpu.utilities.imports import is_available

    arms = ["raw_ddp", "single", *[a for a in args.strategies if a not in ("raw_ddp", "single")]]
    params: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_parity_") as tmp:
        for i, arm in enumerate(arms):
            out = Path(tmp) / arm
            t0 = time.perf_counter()
            try:
                if arm in NEEDS and not is_available(NEEDS[arm]):
                    raise RuntimeError(f"{NEEDS[arm]} is not installed")
                if ARMS[arm] is None:
                    run_raw(args, out)
                elif arm in TWO_NODE_ARMS:
                    run_two_nodes(TWO_NODE_ARMS[arm], args.steps, out)
                else:
                    run_arm(ARMS[arm] or [], args.steps, out)
                params[arm] = load_params(out)
            except Exception as err:  # noqa: BLE001 - a failed arm is reported as failed, with its error
                failed[arm] = str(err)
            seconds[arm] = time.perf_counter() - t0
            shutil.rmtree(out, ignore_errors=True)
            progress(i + 1, len(arms))
    figures: dict[str, dict[str, Any]] = {}
    for arm in (a for a in arms if a not in failed):
        ranks = params[arm]
        for ref, goal in (("raw_ddp", GOAL_VS_RAW), ("single", GOAL_VS_SINGLE)):
            if (
                ref != arm
                and ref in params
                and (arm not in ("raw_ddp", "single") or (arm, ref) == ("raw_ddp", "single"))
            ):
                against = "raw DDP" if ref == "raw_ddp" else "one process on the global batch"
                label = f"{arm} vs {against}: max abs parameter difference"
                figures[label] = figure(max_abs_diff(ranks[0], params[ref][0]), goal)
        if len(ranks) > 1:
            figures[f"{arm}: max abs difference between ranks"] = figure(
                max(max_abs_diff(ranks[0], r) for r in ranks[1:]), 0.0
            )
    write_result(
        args.result,
        name="parity",
        unit="max abs difference",
        arms={},
        ratios=[],
        figures=figures,
        failed=failed,
        config={
            "steps": args.steps,
            "global_batch": 32,
            "optimizer": "SGD(lr=0.1, momentum=0.9)",
            "world_size": 2,
            "arms": {a: ARMS[a] or "raw torch DDP loop (this file)" for a in arms},
            "seconds": {a: round(t) for a, t in seconds.items()},
        },
        notes=[
            "Every arm trains the parity tests' MLP on the same global batches in the same order; a figure is the"
            " largest absolute difference over every parameter element after the last step (rank 0's copy)."
        ],
    )


if __name__ == "__main__":
    main()
