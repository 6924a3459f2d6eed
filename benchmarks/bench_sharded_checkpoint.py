"""Benchmark sharded checkpoints (``sharded_fsdp2``'s default) against full ones and raw torch.distributed.checkpoint.

An MLP with fp32 Adam, built on the meta device and sharded with FSDP2 over 2 CPU ranks (gloo), as ``sharded_fsdp2``
builds a model from ``configure_model``. Per arm, a fresh pair of processes (a process's peak RSS never goes down):

- ``sharded``: the bundle's save (``write_sharded_checkpoint`` of ``sharded_model_state``/``sharded_optimizer_state``,
  each rank its shards, swapped into place atomically) and load (``load_sharded_checkpoint``);
- ``full``: the bundle's ``checkpoint_format="full"``: the whole state gathered to rank 0, one file; every rank reads
  the file to load;
- ``sharded_async``: the same folder written in the background (``ShardedStrategy(async_save=True)``: DCP's
  ``async_save`` over a gloo group of its own); its save time is what training waits for (the copy of the shards to
  CPU memory), and ``landed_s`` the time until the folder is in place;
- ``raw_dcp``: ``torch.distributed.checkpoint.save``/``load`` of ``get_state_dict`` by hand (the floor);
- ``sharded_fsdp2_trainer``: the same through the Trainer, a one-step fit of the MLP built in ``configure_model`` under
  ``strategy="sharded_fsdp2"``, then ``Trainer.save_checkpoint`` and ``strategy.load_checkpoint`` (a sharded folder
  loads in place): what the Trainer adds to the bundle's own save and load;
- ``lightning_fsdp`` (GPU only, ``--accelerator gpu``): the peer, Lightning's
  ``FSDPStrategy(state_dict_type="sharded")`` (FSDP1, every Linear wrapped) through the same Trainer calls, beside
  ``sharded_fsdp2_trainer`` on the same GPUs (up to 2 ranks). FSDP1 refuses the CPU in torch 2.13 ("FSDP needs a non-CPU
  accelerator device");
- ``ddp``: the same model whole on each rank with its Adam state (the memory reference; no checkpoint).

Figures: save and load seconds (median over rounds), and peak resident memory per rank above the import baseline,
through the build, one step and the saves, and through the loads. Goals (issue 30): sharded save <= 1.05 x raw DCP;
sharded's peak <= 0.6 x ddp's.

    python -m benchmarks.bench_sharded_checkpoint                    # ~50M parameters, about 2 minutes on 2 cores
    python -m benchmarks.bench_sharded_checkpoint --width 1024 --rounds 3
    python -m benchmarks.bench_sharded_checkpoint --accelerator gpu       # sharded_fsdp2 against Lightning's
    FSDPStrategy
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import ProcessFailure, finish_rank, run_ranks
from benchmarks.harness.cli import parser
from benchmarks.harness.result import figure, progress, ratio, write_result

WORLD = 2
TRAINER_ARMS = ("sharded_fsdp2_trainer", "lightning_fsdp")
ARMS = ("sharded", "sharded_async", "full", "raw_dcp", "sharded_fsdp2_trainer", "ddp")  # the CPU's
GPU_ARMS = TRAINER_ARMS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__)
    p.add_argument("--width", type=int, default=2048, help="MLP width w; 12 layers of w x w (50M parameters at 2048)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--rounds", type=int, default=5, help="saves and loads per arm (the first is a warm-up)")
    p.add_argument(
        "--zero3", default=True, action=argparse.BooleanOptionalAction, help="reshard_after_forward (ZeRO-3)"
    )
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"), help="gpu: the Trainer arms on up to 2 GPUs")
    p.add_argument(
        "--arms", default=None, help=f"comma-separated; default on cpu {','.join(ARMS)}, on gpu {','.join(GPU_ARMS)}"
    )
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.arms = [a for a in (args.arms or ",".join(ARMS if args.accelerator == "cpu" else GPU_ARMS)).split(",") if a]
    if args.accelerator == "cpu" and "lightning_fsdp" in args.arms:
        p.error("lightning_fsdp runs on GPUs only (--accelerator gpu): torch 2.13's FSDP1 refuses the CPU")
    if args.accelerator == "gpu" and set(args.arms) - set(GPU_ARMS):
        p.error(f"on gpu the arms are {', '.join(GPU_ARMS)}; the others measure CPU ranks")
    return args


def world(accelerator: str) -> int:
    """2 CPU ranks; on GPUs one rank per GPU, up to 2."""
    if accelerator == "cpu":
        return WORLD
    import torch

    return min(WORLD, torch.cuda.device_count())


def _reset_peak() -> float:
    """Start the peak-RSS count afresh and return the RSS now (MiB). Linux: writing 5 to clear_refs resets VmHWM, so
    a peak reached while importing (above the model's own use on a small model) no longer hides the growth."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the high-water mark then counts from process start
        pass
    return _status_mib("VmRSS")


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mib() -> float:
    """The peak RSS since :func:`_reset_peak` (MiB)."""
    return _status_mib("VmHWM")


built_mib: list[float] = []  # peak RSS after the build, after the backward


def _build(args: argparse.Namespace, sharded: bool) -> tuple[Any, Any]:
    import torch
    from torch import nn

    def layers() -> nn.Module:
        return nn.Sequential(*[nn.Linear(args.width, args.width, bias=False) for _ in range(args.layers)])

    if not sharded:
        model = layers()
    else:
        from lightning.fabric.utilities.init import _materialize_distributed_module

        from lightning_mgpu.strategies.fsdp2.sharding import apply_fully_shard

        with torch.device("meta"):
            model = layers()
        # ZeRO-3 (reshard_after_forward): one block's parameters gathered at a time, the setting for a model that does
        # not fit whole; the default ZeRO-2 keeps every gathered block from forward to backward.
        apply_fully_shard(model, WORLD, "cpu", args.zero3, None)
        _materialize_distributed_module(model, torch.device("cpu"))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    built_mib.append(_rss_mib())
    model(torch.randn(4, args.width)).sum().backward()
    built_mib.append(_rss_mib())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def _fit(args: argparse.Namespace, arm: str, at_end: Any) -> None:
    """One step of the MLP built in ``configure_model`` under ``arm``'s strategy; ``at_end(trainer)`` runs before the
    strategy tears down (what ``Trainer.save_checkpoint`` and ``strategy.load_checkpoint`` need)."""
    import lightning.pytorch as pl
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from benchmarks.harness.trainer import quiet_trainer

    class Module(pl.LightningModule):
        def configure_model(self) -> None:
            if not hasattr(self, "net"):
                self.net = nn.Sequential(*[nn.Linear(args.width, args.width, bias=False) for _ in range(args.layers)])

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.net(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=1e-4)

    class AtEnd(pl.Callback):
        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            at_end(trainer)

    strategy: Any = "sharded_fsdp2"
    if arm == "lightning_fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        strategy = FSDPStrategy(auto_wrap_policy={nn.Linear}, state_dict_type="sharded")
    trainer = quiet_trainer(
        strategy=strategy,
        accelerator=args.accelerator,
        devices=world(args.accelerator),
        max_steps=1,
        callbacks=[AtEnd()],
    )
    trainer.fit(Module(), DataLoader(TensorDataset(torch.randn(8, args.width)), batch_size=4))


def _timed(fn: Any) -> float:
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - start


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from lightning_mgpu.checkpoint.io import load_checkpoint_file
    from lightning_mgpu.checkpoint.sharded import (
        temporary_folder,
        write_sharded_checkpoint,
    )
    from lightning_mgpu.strategies.fsdp2 import state as fsdp2
    from lightning_mgpu.utilities import files

    torch.set_num_threads(1)
    rank, arm = int(os.environ["RANK"]), args.worker
    if arm not in TRAINER_ARMS:  # the Trainer's strategy makes its own (NCCL on GPUs)
        dist.init_process_group("gloo")
    # Every arm imports the same modules before the baseline: the figures are the state, not the code.
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor  # noqa: F401
    from lightning.fabric.utilities.init import _materialize_distributed_module  # noqa: F401

    baseline = _reset_peak()
    target = args.worker_out / "ckpt"
    out: dict[str, Any] = {"save_s": [], "load_s": []}
    pending: list[Any] = []
    async_group = dist.new_group(backend="gloo") if arm == "sharded_async" else None
    if async_group is not None:
        out["landed_s"] = []

    def rounds(save: Any, load: Any) -> None:
        for i in range(args.rounds):
            out["save_s"].append(_timed(save))
            if async_group is not None:  # the folder lands: what a save in flight costs in total
                out["landed_s"].append(out["save_s"][-1] + _timed(lambda: pending.pop().result()))
            if rank == 0:
                progress(i + 1, 2 * args.rounds)
        out["after_save_mib"] = _rss_mib() - baseline
        for i in range(args.rounds):
            out["load_s"].append(_timed(load))
            if rank == 0:
                progress(args.rounds + i + 1, 2 * args.rounds)
        out["after_load_mib"] = _rss_mib() - baseline

    if arm in TRAINER_ARMS:

        def at_end(trainer: Any) -> None:
            out["after_step_mib"] = _rss_mib() - baseline
            rounds(lambda: trainer.save_checkpoint(target), lambda: trainer.strategy.load_checkpoint(target))

        _fit(args, arm, at_end)
        finish_rank(args.worker_out, out)
    model, optimizer = _build(args, sharded=arm != "ddp")
    out |= {
        "after_build_mib": built_mib[0] - baseline,
        "after_backward_mib": built_mib[1] - baseline,
        "after_step_mib": _rss_mib() - baseline,
    }

    def save() -> None:
        if arm in ("sharded", "sharded_async"):
            checkpoint = {
                "state_dict": fsdp2.sharded_model_state(model),
                "optimizer_states": [fsdp2.sharded_optimizer_state(model, optimizer)],
                "global_step": 1,
            }
            tmp = [str(temporary_folder(target))]
            dist.broadcast_object_list(tmp, src=0)
            pending.append(
                write_sharded_checkpoint(
                    checkpoint, target, Path(tmp[0]), coordinator=rank == 0, async_group=async_group
                )
            )
        elif arm == "full":
            checkpoint = {
                "state_dict": fsdp2.full_model_state(model),
                "optimizer_states": [fsdp2.full_optimizer_state(model, optimizer)],
                "global_step": 1,
            }
            if rank == 0:
                files.atomic_write(target, lambda f: torch.save(checkpoint, f))
        else:
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(target) + f".{len(out['save_s'])}")

    def load() -> None:
        if arm in ("sharded", "sharded_async"):
            fsdp2.load_sharded_checkpoint(model, [optimizer], target)
        elif arm == "full":
            checkpoint = load_checkpoint_file(target)
            fsdp2.load_full_model_state(model, checkpoint["state_dict"])
            fsdp2.load_full_optimizer_state(model, optimizer, checkpoint["optimizer_states"][0])
        else:
            model_state, optim_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optim": optim_state}
            dcp.load(state, checkpoint_id=str(target) + ".0")
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    if arm != "ddp":
        rounds(save, load)
    finish_rank(args.worker_out, out)


def launch(args: argparse.Namespace, arm: str) -> list[dict[str, Any]]:
    """Two ranks of this script as ``--worker ARM``.

    Raises:
        ProcessFailure: a rank failed (both were stopped).
    """
    # glibc raises its mmap threshold after the first large free, then keeps freed tensors' pages in its heap: RSS
    # would count memory no tensor holds. A fixed threshold maps and unmaps each large tensor.
    env = {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    cmd = [
        "--worker",
        arm,
        "--width",
        str(args.width),
        "--layers",
        str(args.layers),
        "--rounds",
        str(args.rounds),
        "--zero3" if args.zero3 else "--no-zero3",
    ]
    return run_ranks(
        __spec__.name, [*cmd, "--accelerator", args.accelerator], world(args.accelerator), env=env, what=f"arm {arm}"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    params = args.layers * args.width**2
    results: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}
    for arm in args.arms:
        try:
            results[arm] = launch(args, arm)
        except ProcessFailure as err:
            failed[arm] = str(err)[-2000:]
    # Per round, the slower rank's time is the save's time (both ranks wait at the barrier anyway).
    arms = {
        arm: {
            key: [max(r[key][i] for r in ranks) for i in range(1, args.rounds)]
            for key in ("save_s", "load_s", "landed_s")
            if key in ranks[0]
        }
        for arm, ranks in results.items()
        if arm != "ddp"
    }
    memory = {
        arm: [max(r.get(k, 0.0) for k in ("after_step_mib", "after_save_mib", "after_load_mib")) * 2**20 for r in ranks]
        for arm, ranks in results.items()
    }
    figures: dict[str, dict[str, Any]] = {}
    notes: list[str] = []

    def share(label: str, num: tuple[str, str], den: tuple[str, str], goal: float | None = None) -> None:
        if num[0] not in results or den[0] not in results:
            return
        top, bottom = (max(r[key] for r in results[arm]) for arm, key in (num, den))
        if bottom <= 0:  # a model too small to lift the peak above the baseline (the dry size): no figure, said so
            notes.append(f"{label}: not measurable, {den[0]}'s peak did not rise above the import baseline")
            return
        figures[label] = figure(top / bottom, goal)

    share(
        "sharded / ddp peak RSS per rank, build + step + saves",
        ("sharded", "after_save_mib"),
        ("ddp", "after_step_mib"),
        goal=0.6,
    )
    share("full / ddp peak RSS per rank, build + step + saves", ("full", "after_save_mib"), ("ddp", "after_step_mib"))
    share(
        "sharded / full peak RSS per rank, through the loads", ("sharded", "after_load_mib"), ("full", "after_load_mib")
    )
    if "landed_s" in arms.get("sharded_async", {}) and "sharded" in arms:
        # The whole background save (copy, writes, the folder's swap) against the synchronous one, medians of the
        # rounds.
        landed = statistics.median(arms["sharded_async"]["landed_s"]) / statistics.median(arms["sharded"]["save_s"])
        figures["sharded async save, until landed / sharded save"] = figure(landed)
    ratios = [
        ratio("sharded save / raw DCP save", "sharded", "raw_dcp", "save_s", goal=1.05),
        ratio("sharded load / raw DCP load", "sharded", "raw_dcp", "load_s"),
        ratio("full save / sharded save", "full", "sharded", "save_s"),
        # What training waits for with async_save (the shards copied to CPU memory), and the whole background save.
        ratio("sharded async save, training blocked / sharded save", "sharded_async", "sharded", "save_s"),
        ratio("full load / sharded load", "full", "sharded", "load_s"),
        # The peer, through the Trainer on both sides: Lightning's FSDPStrategy(state_dict_type="sharded").
        ratio("sharded_fsdp2 (Trainer) save / sharded save", "sharded_fsdp2_trainer", "sharded", "save_s"),
        ratio(
            "sharded_fsdp2 save / Lightning FSDPStrategy sharded save (Trainer.save_checkpoint, GPU)",
            "sharded_fsdp2_trainer",
            "lightning_fsdp",
            "save_s",
        ),
        ratio(
            "sharded_fsdp2 load / Lightning FSDPStrategy sharded load (strategy.load_checkpoint)",
            "sharded_fsdp2_trainer",
            "lightning_fsdp",
            "load_s",
        ),
    ]
    ratios = [r for r in ratios if r["num"] in args.arms and r["den"] in args.arms]  # the arms this run chose
    write_result(
        args.result,
        name="sharded_checkpoint",
        unit="s",
        arms=arms,
        ratios=ratios,
        figures=figures,
        memory=memory,
        memory_label="peak RSS per rank above the import baseline (build, step, saves, loads)",
        failed=failed,
        notes=notes,
        config={
            "params": params,
            "width": args.width,
            "layers": args.layers,
            "rounds": args.rounds,
            "world": world(args.accelerator),
            "zero3": args.zero3,
            "accelerator": args.accelerator,
        },
    )


if __name__ == "__main__":
    main()
