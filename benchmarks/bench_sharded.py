"""Benchmark ``strategy='sharded'`` against ``ddp`` (and a raw FairScale loop) at world size 2.

The model is an MLP trained with fp32 Adam, whose optimizer state (8 bytes per parameter) dominates the
model state. Three things are measured, per rank:

1. Model-state bytes (parameters + gradients + optimizer state) after an optimizer step, against the
   ZeRO ideal. With fp32 Adam DDP keeps 4 + 4 + 8 = 16 bytes per parameter; ZeRO-2 on N ranks keeps
   4 + 4/N + 8/N, i.e. 0.625 of DDP at N = 2 (ZeRO-1, the torch backend: 4 + 4 + 8/N = 0.75).
2. Peak memory: RSS on CPU (``ru_maxrss``, and the growth over the RSS before the model was built),
   ``torch.cuda.max_memory_allocated`` on GPU. Measured in a fresh pair of processes per strategy, since a
   process's peak RSS never goes down.
3. Step time: ``sharded`` vs ``ddp`` (goal <= 1.10) and vs a hand-written FairScale OSS +
   ShardedDataParallel loop (goal <= 1.05); on GPUs also vs Lightning's own
   ``FSDPStrategy(sharding_strategy="SHARD_GRAD_OP")``, the ZeRO-2 replacement Lightning recommended (it refuses
   the CPU). One pair of processes runs the arms in interleaved rounds
   (the order rotates each round); each run's step time is the median over its timed steps, and the
   reported ratios are the medians of the per-round ratios.

Run (CPU, gloo; uses 2 processes with 1 thread each by default)::

    python -m benchmarks.bench_sharded                 # about 1-2 minutes on 2 idle cores
    python -m benchmarks.bench_sharded --hidden 4096 --rounds 7 --steps 20
    python -m benchmarks.bench_sharded --accelerator gpu   # 2 GPUs, NCCL, max_memory_allocated

Only public APIs are used: Lightning's ``Trainer``, the ``sharded``/``ddp`` strategy names,
``lightning_mgpu.utilities.optimizers.local_optimizer_state_bytes``, and FairScale's OSS/ShardedDataParallel
for the raw loop.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import ProcessFailure, finish_rank, interleave, run_ranks
from benchmarks.harness.cli import config, parser
from benchmarks.harness.result import figure, ratio, write_result
from benchmarks.harness.stats import median_interval

WORLD = 2
ARMS = ["ddp", "sharded", "sharded_fsdp2", "raw", "fsdp2"]  # raw: FairScale by hand; fsdp2: torch FSDP2 by hand
#: On GPUs only (Lightning's FSDPStrategy refuses the CPU): the ZeRO-2 peer Lightning recommends in sharded's place.
GPU_ARMS = ["lightning_fsdp"]


def arms_for(accelerator: str) -> list[str]:
    """The arms that run on ``accelerator``."""
    return ARMS + (GPU_ARMS if accelerator == "gpu" else [])


ZERO2_IDEAL = (4 + 4 / WORLD + 8 / WORLD) / 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, accelerator="cpu", batch_size=16, rounds=5, steps=10, warmup=3, threads=1)
    p.add_argument("--hidden", type=int, default=1536, help="MLP width h (params ~ 3 h^2: 7.1M at the default)")
    p.add_argument("--worker", choices=("memory", "timing"), help=argparse.SUPPRESS)
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- worker side
def build_model(hidden: int) -> Any:
    """An MLP whose weights split evenly over 2 ranks (FairScale assigns whole tensors, greedily)."""
    from benchmarks.harness.models import mlp

    return mlp(hidden // 2, hidden, hidden, hidden, hidden // 2)


def make_loader(args: argparse.Namespace, rank: int) -> Any:
    from torch.utils.data import DataLoader, DistributedSampler

    from benchmarks.harness.models import random_data

    data = random_data(args.batch_size * WORLD * (args.warmup + args.steps + 1), args.hidden // 2)
    return DataLoader(
        data, batch_size=args.batch_size, sampler=DistributedSampler(data, WORLD, rank, shuffle=False), drop_last=True
    )


def _device(args: argparse.Namespace) -> Any:
    import torch

    return torch.device("cuda", int(os.environ["LOCAL_RANK"])) if args.accelerator == "gpu" else torch.device("cpu")


def model_state(module: Any, optimizer: Any) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state this rank holds, after an optimizer step (gradients are still
    there until the next zero_grad). A DTensor (FSDP2) counts its local shard, a sharded optimizer its own state."""
    from lightning_mgpu.utilities.optimizers import local_optimizer_state_bytes

    def local_bytes(tensors):
        return sum((t.to_local() if hasattr(t, "to_local") else t).nbytes for t in tensors)

    params = list(module.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    return {
        "params": local_bytes(params),
        "grads": local_bytes(grads),
        "optimizer": local_optimizer_state_bytes(optimizer),
    }


def _step_figures(args: argparse.Namespace, wall: list[float], cpu: list[float]) -> dict[str, float]:
    """A run's median wall and process-CPU time per step, after the warm-up."""
    return {
        "step_s": median_interval(wall, args.warmup, args.steps),
        "cpu_s": median_interval(cpu, args.warmup, args.steps),
    }


def lightning_run(args: argparse.Namespace, strategy: str) -> dict[str, Any]:
    import torch
    from lightning.pytorch.callbacks import LambdaCallback

    from benchmarks.harness.models import Trainable
    from benchmarks.harness.trainer import timed_fit

    chosen: Any = strategy
    if strategy == "lightning_fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        chosen = FSDPStrategy(sharding_strategy="SHARD_GRAD_OP")  # ZeRO-2: gradients and optimizer state sharded
    state: dict[str, int] = {}
    measure = LambdaCallback(
        on_train_batch_end=lambda trainer, module, *_: state.update(model_state(module, trainer.optimizers[0]))
    )
    model = Trainable(
        build_model(args.hidden),
        "mse_loss",
        lambda params: torch.optim.Adam(params, lr=1e-4),
        loader=lambda m: make_loader(args, m.global_rank),
    )
    clock = timed_fit(
        model,
        warmup=args.warmup,
        steps=args.steps,
        device=_device(args),
        callbacks=[measure],
        strategy=chosen,
        accelerator=args.accelerator,
        devices=WORLD,
        use_distributed_sampler=False,
    )
    return {**_step_figures(args, clock.marks, clock.cpu_marks), "state": state}


def raw_fairscale_run(args: argparse.Namespace) -> dict[str, Any]:
    """The same training written directly against FairScale: the floor for Lightning's overhead."""
    import torch
    import torch.distributed as dist
    from fairscale.nn.data_parallel import ShardedDataParallel
    from fairscale.optim import OSS

    device = _device(args)
    model = build_model(args.hidden).to(device)
    opt = OSS(model.parameters(), optim=torch.optim.Adam, lr=1e-4)
    model = ShardedDataParallel(model, opt, reduce_buffer_size=0)
    return _raw_loop(args, model, opt, make_loader(args, dist.get_rank()), device)


def _raw_loop(args: argparse.Namespace, model: Any, opt: Any, loader: Any, device: Any) -> dict[str, float]:
    """The hand-written training loop of the raw arms; median wall and process-CPU time per step after the warm-up."""
    from benchmarks.harness.clock import raw_steps
    from benchmarks.harness.models import train_step

    return _step_figures(args, *raw_steps(train_step(model, opt), loader, args.warmup + args.steps + 1, device))


def raw_fsdp2_run(args: argparse.Namespace) -> dict[str, Any]:
    """The peer Lightning recommends instead of FairScale: torch FSDP2 with ZeRO-2 semantics, in a raw loop.

    ``fully_shard`` each Linear, then the root, with ``reshard_after_forward=False`` (parameters stay gathered between
    forward and backward: ZeRO-2). FSDP2 runs on CPU with gloo (checked on torch 2.13).
    """
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    rank = int(os.environ["LOCAL_RANK"])
    if not dist.is_initialized():
        dist.init_process_group("nccl" if args.accelerator == "gpu" else "gloo", rank=rank, world_size=WORLD)
    device = _device(args)
    mesh = init_device_mesh(device.type, (WORLD,))
    model = build_model(args.hidden).to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    return {**_raw_loop(args, model, opt, make_loader(args, rank), device), "state": model_state(model, opt)}


RAW = {"raw": "raw_fairscale_run", "fsdp2": "raw_fsdp2_run"}


def _run_arm(args: argparse.Namespace, name: str) -> dict[str, Any]:
    return globals()[RAW[name]](args) if name in RAW else lightning_run(args, name)


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    if args.accelerator == "cpu":
        torch.set_num_threads(args.threads)
    rank = int(os.environ["LOCAL_RANK"])
    result: dict[str, Any] = {"rank": rank}
    if args.worker == "memory":
        import psutil

        result["rss_before_model"] = psutil.Process().memory_info().rss
        if args.accelerator == "gpu":
            torch.cuda.set_device(rank)
            torch.cuda.reset_peak_memory_stats()
        result.update(_run_arm(args, args.config))
        result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        if args.accelerator == "gpu":
            result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    else:
        timings = {
            name: (lambda name=name: {k: v for k, v in _run_arm(args, name).items() if k != "state"})
            for name in arms_for(args.accelerator)
        }
        result["arms"] = interleave(timings, args.rounds, report=rank == 0)
    if dist.is_initialized():
        dist.barrier()
    finish_rank(args.worker_out, result)


# ----------------------------------------------------------------------------- launcher side
def launch(argv: list[str], kind: str, config: str) -> list[dict[str, Any]]:
    """Run 2 ranks of this script, with this run's arguments ``argv``, as ``--worker KIND``; both are killed if either
    fails."""
    try:
        return run_ranks(
            __spec__.name, [*argv, "--worker", kind, "--config", config], WORLD, what=f"worker {kind}/{config}"
        )
    except ProcessFailure as err:
        raise SystemExit(str(err)) from err


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    n_params = sum(p.numel() for p in build_model(args.hidden).parameters())
    configs = ["ddp", "sharded", "sharded_fsdp2", "fsdp2", *(GPU_ARMS if args.accelerator == "gpu" else [])]
    memory = {cfg: launch(argv, "memory", cfg) for cfg in configs}
    timing = launch(argv, "timing", "all")[0]["arms"]  # rank 0's clocks; the ranks step in lockstep

    def state_ratio(cfg: str) -> float:
        """The largest rank's model state (params + grads + optimizer state) against ddp's on the same rank."""
        total = lambda s: s["params"] + s["grads"] + s["optimizer"]  # noqa: E731
        return max(total(r["state"]) / total(d["state"]) for r, d in zip(memory[cfg], memory["ddp"]))

    key = "max_memory_allocated" if args.accelerator == "gpu" else "peak_rss"
    figures = {
        f"sharded / ddp model state per rank (ZeRO-2 ideal {ZERO2_IDEAL:.3f})": figure(
            state_ratio("sharded"), goal=round(ZERO2_IDEAL + 0.01, 3)
        ),
        "raw fsdp2 / ddp model state per rank": figure(state_ratio("fsdp2")),
        "sharded_fsdp2 / ddp model state per rank (ideal 0.5: params, grads and Adam all sharded)": figure(
            state_ratio("sharded_fsdp2"), goal=0.51
        ),
        f"sharded / ddp peak {'memory' if args.accelerator == 'gpu' else 'RSS'} per rank": figure(
            max(s[key] / d[key] for s, d in zip(memory["sharded"], memory["ddp"]))
        ),
    }
    if args.accelerator == "cpu":
        growth = max(
            (s["peak_rss"] - s["rss_before_model"]) / (d["peak_rss"] - d["rss_before_model"])
            for s, d in zip(memory["sharded"], memory["ddp"])
        )
        figures["sharded / ddp peak RSS growth over the RSS before the model, per rank"] = figure(growth)
    peers = []
    if "lightning_fsdp" in memory:
        figures["Lightning FSDPStrategy(SHARD_GRAD_OP) / ddp model state per rank"] = figure(
            state_ratio("lightning_fsdp")
        )
        peers = [ratio("sharded / Lightning FSDPStrategy(SHARD_GRAD_OP)", "sharded", "lightning_fsdp")]
    write_result(
        args.result,
        name="sharded",
        arms={name: {m: [r[m] for r in rounds] for m in ("step_s", "cpu_s")} for name, rounds in timing.items()},
        ratios=[
            ratio("sharded / ddp", "sharded", "ddp", goal=1.10),
            ratio("sharded / raw FairScale loop", "sharded", "raw", goal=1.05),
            ratio("sharded / raw FSDP2 (ZeRO-2)", "sharded", "fsdp2"),
            ratio("sharded / ddp (process CPU time)", "sharded", "ddp", "cpu_s"),
            ratio("sharded_fsdp2 / raw FSDP2 loop", "sharded_fsdp2", "fsdp2", goal=1.05),
            ratio("sharded_fsdp2 / ddp", "sharded_fsdp2", "ddp"),
            *peers,
        ],
        figures=figures,
        memory={cfg: [sum(r["state"].values()) for r in ranks] for cfg, ranks in memory.items()},
        config={**config(args), "params": n_params, "world_size": WORLD, "optimizer": "Adam fp32"},
        notes=[
            "Model state = parameters + gradients + optimizer state held by a rank after an optimizer step.",
            "FSDP2 also shards parameters and gradients (ZeRO-3 storage with reshard_after_forward=False between"
            " steps).",
            "Step time is the median of each run's timed steps; wall time is the goal's measure, process CPU time is"
            " steadier on a busy machine.",
        ],
    )


if __name__ == "__main__":
    main(sys.argv[1:])
