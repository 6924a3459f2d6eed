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
``lightning_mgpu.strategies.sharded.local_optimizer_state_bytes``, and FairScale's OSS/ShardedDataParallel
for the raw loop.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import RankFailure, interleave, run_ranks, write_rank_result
from benchmarks.harness.result import figure, ratio, write_result
from lightning_mgpu.utilities.process_group import destroy_process_group_if_done

WORLD = 2
ARMS = ["ddp", "sharded", "sharded_fsdp2", "raw", "fsdp2"]  # raw: FairScale by hand; fsdp2: torch FSDP2 by hand
#: On GPUs only (Lightning's FSDPStrategy refuses the CPU): the ZeRO-2 peer Lightning recommends in sharded's place.
GPU_ARMS = ["lightning_fsdp"]


def arms_for(accelerator: str) -> list[str]:
    """The arms that run on ``accelerator``."""
    return ARMS + (GPU_ARMS if accelerator == "gpu" else [])


ZERO2_IDEAL = (4 + 4 / WORLD + 8 / WORLD) / 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--hidden", type=int, default=1536, help="MLP width h (params ~ 3 h^2: 7.1M at the default)")
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    p.add_argument("--steps", type=int, default=10, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per run")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank on CPU")
    p.add_argument("--result", type=Path, default=None, help="write every round for benchmarks/run.py here")
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
    return DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data, WORLD, rank, shuffle=False), drop_last=True)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class _Recorder:
    """A Lightning callback (built lazily) that times steps and measures model-state bytes after a step."""

    @staticmethod
    def make(warmup: int) -> Any:
        import lightning.pytorch as pl
        import torch

        from lightning_mgpu.strategies.sharded.strategy import (
            local_optimizer_state_bytes,
        )

        class Recorder(pl.Callback):
            def __init__(self) -> None:
                self.step_times: list[float] = []
                self.cpu_times: list[float] = []
                self.state: dict[str, int] = {}
                self._last: tuple[float, float] | None = None

            def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
                if _cuda():
                    torch.cuda.synchronize()
                now = (time.perf_counter(), time.process_time())
                if self._last is not None and trainer.global_step > warmup:
                    self.step_times.append(now[0] - self._last[0])
                    self.cpu_times.append(now[1] - self._last[1])
                self._last = now
                # After the optimizer step and before the next zero_grad: gradients still exist.
                params = [_local(p) for p in pl_module.parameters()]
                grads = [_local(p.grad) for p in pl_module.parameters() if p.grad is not None]
                self.state = {
                    "params": sum(p.numel() * p.element_size() for p in params),
                    "grads": sum(g.numel() * g.element_size() for g in grads),
                    "optimizer": local_optimizer_state_bytes(trainer.optimizers[0]),
                }

        return Recorder()


def lightning_run(args: argparse.Namespace, strategy: str) -> dict[str, Any]:
    import torch

    from benchmarks.harness.models import Trainable
    from benchmarks.harness.trainer import quiet_trainer

    chosen: Any = strategy
    if strategy == "lightning_fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        chosen = FSDPStrategy(sharding_strategy="SHARD_GRAD_OP")  # ZeRO-2: gradients and optimizer state sharded
    os.environ["WORLD_SIZE"] = str(WORLD)  # Lightning's teardown of the previous run removes it
    recorder = _Recorder.make(args.warmup)
    model = Trainable(build_model(args.hidden), "mse_loss", lambda params: torch.optim.Adam(params, lr=1e-4),
                      loader=lambda m: make_loader(args, m.global_rank))  # fmt: skip
    quiet_trainer(strategy=chosen, accelerator=args.accelerator, devices=WORLD, max_steps=args.warmup + args.steps + 1,
                  use_distributed_sampler=False, callbacks=[recorder]).fit(model)  # fmt: skip
    return {"step_s": statistics.median(recorder.step_times), "cpu_s": statistics.median(recorder.cpu_times), "state": recorder.state}


def raw_fairscale_run(args: argparse.Namespace) -> dict[str, Any]:
    """The same training written directly against FairScale: the floor for Lightning's overhead."""
    import torch
    import torch.distributed as dist
    from fairscale.nn.data_parallel import ShardedDataParallel
    from fairscale.optim import OSS

    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if args.accelerator == "gpu" else torch.device("cpu")
    model = build_model(args.hidden).to(device)
    opt = OSS(model.parameters(), optim=torch.optim.Adam, lr=1e-4)
    model = ShardedDataParallel(model, opt, reduce_buffer_size=0)
    return _raw_loop(args, model, opt, make_loader(args, dist.get_rank()), device)


def _raw_loop(args: argparse.Namespace, model: Any, opt: Any, loader: Any, device: Any) -> dict[str, float]:
    """The hand-written training loop of the raw arms; median wall and process-CPU time per step after the warm-up."""
    import torch
    from torch import nn

    times, cpu_times, last = [], [], None
    for step, (x, y) in enumerate(loader, start=1):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        now = (time.perf_counter(), time.process_time())
        if last is not None and step > args.warmup + 1:
            times.append(now[0] - last[0])
            cpu_times.append(now[1] - last[1])
        last = now
        if step == args.warmup + args.steps + 1:
            break
    return {"step_s": statistics.median(times), "cpu_s": statistics.median(cpu_times)}


def _local(t: Any) -> Any:
    """A DTensor's local shard (FSDP2 parameters, gradients and optimizer state), else the tensor."""
    return t.to_local() if hasattr(t, "to_local") else t


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
    device = torch.device("cuda", rank) if args.accelerator == "gpu" else torch.device("cpu")
    mesh = init_device_mesh(device.type, (WORLD,))
    model = build_model(args.hidden).to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    timing = _raw_loop(args, model, opt, make_loader(args, rank), device)
    params = [_local(p) for p in model.parameters()]
    grads = [_local(p.grad) for p in model.parameters() if p.grad is not None]
    opt_state = [_local(v) for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    state = {
        "params": sum(t.numel() * t.element_size() for t in params),
        "grads": sum(t.numel() * t.element_size() for t in grads),
        "optimizer": sum(t.numel() * t.element_size() for t in opt_state),
    }
    return {**timing, "state": state}


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
        result["rss_before_model"] = _rss_bytes()
        if args.accelerator == "gpu":
            torch.cuda.set_device(rank)
            torch.cuda.reset_peak_memory_stats()
        result.update(_run_arm(args, args.config))
        result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        if args.accelerator == "gpu":
            result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    else:
        timings = {name: (lambda name=name: {k: v for k, v in _run_arm(args, name).items() if k != "state"}) for name in arms_for(args.accelerator)}
        result["arms"] = interleave(timings, args.rounds, report=rank == 0)
    if dist.is_initialized():
        dist.barrier()
    write_rank_result(args.worker_out, result)
    # A gloo group left alive at exit can abort the process ("terminate called without an active exception"); the raw
    # FSDP2 arm creates one itself, with nothing to destroy it.
    destroy_process_group_if_done()


# ----------------------------------------------------------------------------- launcher side
def launch(args: argparse.Namespace, kind: str, config: str) -> list[dict[str, Any]]:
    """Run 2 ranks of this script as ``--worker KIND``; both are killed if either fails."""
    forwarded = ["--accelerator", args.accelerator, "--hidden", str(args.hidden), "--batch-size", str(args.batch_size),
                 "--rounds", str(args.rounds), "--steps", str(args.steps), "--warmup", str(args.warmup),
                 "--threads", str(args.threads)]  # fmt: skip
    try:
        return run_ranks(__spec__.name, ["--worker", kind, "--config", config, *forwarded], WORLD, what=f"worker {kind}/{config}")
    except RankFailure as err:
        raise SystemExit(str(err)) from err


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    n_params = sum(p.numel() for p in build_model(args.hidden).parameters())
    configs = ["ddp", "sharded", "sharded_fsdp2", "fsdp2", *(GPU_ARMS if args.accelerator == "gpu" else [])]
    memory = {cfg: launch(args, "memory", cfg) for cfg in configs}
    timing = launch(args, "timing", "all")[0]["arms"]  # rank 0's clocks; the ranks step in lockstep

    def state_ratio(cfg: str) -> float:
        """The largest rank's model state (params + grads + optimizer state) against ddp's on the same rank."""
        total = lambda s: s["params"] + s["grads"] + s["optimizer"]  # noqa: E731
        return max(total(r["state"]) / total(d["state"]) for r, d in zip(memory[cfg], memory["ddp"]))

    key = "max_memory_allocated" if args.accelerator == "gpu" else "peak_rss"
    figures = {
        f"sharded / ddp model state per rank (ZeRO-2 ideal {ZERO2_IDEAL:.3f})": figure(state_ratio("sharded"), goal=round(ZERO2_IDEAL + 0.01, 3)),
        "raw fsdp2 / ddp model state per rank": figure(state_ratio("fsdp2")),
        "sharded_fsdp2 / ddp model state per rank (ideal 0.5: params, grads and Adam all sharded)": figure(state_ratio("sharded_fsdp2"), goal=0.51),
        f"sharded / ddp peak {'memory' if args.accelerator == 'gpu' else 'RSS'} per rank":
            figure(max(s[key] / d[key] for s, d in zip(memory["sharded"], memory["ddp"]))),
    }  # fmt: skip
    if args.accelerator == "cpu":
        growth = max((s["peak_rss"] - s["rss_before_model"]) / (d["peak_rss"] - d["rss_before_model"]) for s, d in zip(memory["sharded"], memory["ddp"]))
        figures["sharded / ddp peak RSS growth over the RSS before the model, per rank"] = figure(growth)
    peers = []
    if "lightning_fsdp" in memory:
        figures["Lightning FSDPStrategy(SHARD_GRAD_OP) / ddp model state per rank"] = figure(state_ratio("lightning_fsdp"))
        peers = [ratio("sharded / Lightning FSDPStrategy(SHARD_GRAD_OP)", "sharded", "lightning_fsdp")]
    write_result(
        args.result, name="sharded", arms={name: {m: [r[m] for r in rounds] for m in ("step_s", "cpu_s")} for name, rounds in timing.items()},
        ratios=[ratio("sharded / ddp", "sharded", "ddp", goal=1.10), ratio("sharded / raw FairScale loop", "sharded", "raw", goal=1.05),
                ratio("sharded / raw FSDP2 (ZeRO-2)", "sharded", "fsdp2"), ratio("sharded / ddp (process CPU time)", "sharded", "ddp", "cpu_s"),
                ratio("sharded_fsdp2 / raw FSDP2 loop", "sharded_fsdp2", "fsdp2", goal=1.05), ratio("sharded_fsdp2 / ddp", "sharded_fsdp2", "ddp"),
                *peers],
        figures=figures, memory={cfg: [sum(r["state"].values()) for r in ranks] for cfg, ranks in memory.items()},
        config={**{k: getattr(args, k) for k in ("accelerator", "hidden", "batch_size", "rounds", "steps", "warmup", "threads")},
                "params": n_params, "world_size": WORLD, "optimizer": "Adam fp32"},
        notes=["Model state = parameters + gradients + optimizer state held by a rank after an optimizer step.",
               "FSDP2 also shards parameters and gradients (ZeRO-3 storage with reshard_after_forward=False between steps).",
               "Step time is the median of each run's timed steps; wall time is the goal's measure, process CPU time is"
               " steadier on a busy machine."],
    )  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
