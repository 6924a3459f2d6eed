"""A deterministic training run used by parity and checkpoint tests across strategies.

Run as ``python -m tests.integration.runners.run_parity --strategy ddp --devices 2 --out DIR``. Every
configuration sees the same global batches in the same order, so a strategy's final
parameters can be compared with single-process training on the global batch:

- the data is a fixed tensor; loaders do not shuffle;
- each process loads ``global_batch // world`` samples per step through its own
  ``DistributedSampler(shuffle=False)`` (Lightning's injected training sampler always
  shuffles), so rank r gets the samples r, r+N, ... and the ranks together cover exactly
  the global batch;
- the model (an MLP without dropout or BatchNorm) is initialised from a fixed seed.

Outputs in ``--out``: ``params_rank{r}.pt`` (each rank's final state dict, plain keys),
``optimizer_rank{r}.pt`` (each rank's optimizer state as held in memory), ``result.json``.

Several runs in one launch: ``... --out A --steps 5 --then --out B --steps 5 --optimizer adam``. The runs go one after
the other in the same processes (all on the same number of devices), which saves a launch per run: a launch is mostly
imports. Under ``ddp`` the second rank re-runs this command line, so it walks the same sequence.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

import torch

import lightning_mgpu  # noqa: F401
from lightning_mgpu.checkpoint.sharded import is_sharded_checkpoint
from lightning_mgpu.testing.parity import IN, OUT, ParityModule, make_data, parity_module_for  # noqa: F401
from lightning_mgpu.utilities.optimizers import local_optimizer
from tests.helpers.launch import split_runs
from tests.helpers.trainer import quiet_trainer, save_at_train_end


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", default="auto")
    p.add_argument("--devices", default=1, type=int)
    p.add_argument("--num-nodes", default=1, type=int)
    p.add_argument(
        "--num-samples",
        default=None,
        type=int,
        help="default: global batch x accumulation x steps (no short last batch)",
    )
    p.add_argument("--steps", default=5, type=int, help="optimizer steps")
    p.add_argument("--global-batch", default=32, type=int, help="samples per micro-batch over all ranks")
    p.add_argument("--accumulate", default=1, type=int)
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    p.add_argument("--lr", default=0.1, type=float)
    p.add_argument("--clip-val", default=None, type=float)
    p.add_argument("--clip-algo", default="norm", choices=("norm", "value"))
    p.add_argument("--precision", default="32-true")
    p.add_argument("--manual", action="store_true")
    p.add_argument("--resume", default=None, help="checkpoint to resume from")
    p.add_argument(
        "--sharded-backend",
        default=None,
        choices=("fairscale", "torch", "fsdp2"),
        help="the sharded engine for --strategy sharded*: ShardedStrategy, ZeroStrategy or FSDP2Strategy",
    )
    p.add_argument("--accelerator", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--namespace", default="lightning.pytorch", choices=("lightning.pytorch", "pytorch_lightning"))
    p.add_argument(
        "--process-group-backend",
        default=None,
        help="e.g. gloo for ranks that share one GPU (tests/helpers/shared_gpu.py)",
    )
    p.add_argument(
        "--fsdp2-mp",
        default=None,
        choices=("bf16", "fp16"),
        help="FSDP2Strategy(mp_policy=MixedPrecisionPolicy(param_dtype=...))",
    )
    p.add_argument("--fsdp2-offload", action="store_true", help="FSDP2Strategy(offload_policy=CPUOffloadPolicy())")
    p.add_argument(
        "--checkpoint-format", default=None, choices=("sharded", "full"), help="the sharded engine's checkpoint_format"
    )
    p.add_argument(
        "--fsdp2-gather",
        default=None,
        choices=("dcp", "by_hand"),
        help="force FSDP2's full-checkpoint gather for this run",
    )
    p.add_argument(
        "--hidden",
        default=None,
        type=int,
        help="the MLP's width (default: lightning_mgpu.testing.parity.HIDDEN); wider for memory figures",
    )
    p.add_argument("--out", required=True, type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.fsdp2_gather is None:
        return _main(args)
    # The choice is read from the environment at each save (strategies/fsdp2/state.py gathers_by_hand): set it for
    # this run only, so one launch can compare both gathers.
    from lightning_mgpu.strategies.fsdp2.state import GATHER_ENV

    os.environ[GATHER_ENV] = "1" if args.fsdp2_gather == "by_hand" else "0"
    try:
        return _main(args)
    finally:
        del os.environ[GATHER_ENV]


def _main(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    # The bundle for the chosen Lightning distribution: lightning_mgpu, or its pytorch_lightning twin.
    bundle = importlib.import_module("lightning_mgpu.pl" if args.namespace == "pytorch_lightning" else "lightning_mgpu")
    strategy = args.strategy
    if args.strategy == "ddp2_emulated":  # ddp2 with CPU threads as each node's devices
        strategy = importlib.import_module(f"{bundle.__name__}.testing.ddp2").EmulatedDDP2Strategy()
    elif args.strategy == "dp_emulated":
        strategy = importlib.import_module(f"{bundle.__name__}.testing.dp").EmulatedDataParallelStrategy()
    start_method = "spawn" if args.strategy.endswith("_spawn") else "popen"
    pg = {"process_group_backend": args.process_group_backend} if args.process_group_backend else {}
    if args.sharded_backend:
        fmt: dict = {"checkpoint_format": args.checkpoint_format} if args.checkpoint_format else {}
        if args.fsdp2_mp or args.fsdp2_offload:
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

            if args.fsdp2_mp:
                fmt["mp_policy"] = MixedPrecisionPolicy(
                    param_dtype=getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[args.fsdp2_mp])
                )
            if args.fsdp2_offload:
                fmt["offload_policy"] = CPUOffloadPolicy()
        engine = {"fairscale": "ShardedStrategy", "torch": "ZeroStrategy", "fsdp2": "FSDP2Strategy"}[
            args.sharded_backend
        ]
        strategy = getattr(bundle, engine)(start_method=start_method, **fmt, **pg)
    elif pg and args.strategy in ("ddp", "ddp_spawn"):
        strategies = importlib.import_module(f"{args.namespace}.strategies")
        strategy = strategies.DDPStrategy(start_method=start_method, **pg)
    elif pg and args.strategy == "ddp2":
        strategy = bundle.DDP2Strategy(**pg)
    elif args.strategy == "fsdp_shard_grad_op":  # Lightning's own ZeRO-2, the memory peer of sharded (GPU only)
        strategies = importlib.import_module(f"{args.namespace}.strategies")
        strategy = strategies.FSDPStrategy(sharding_strategy="SHARD_GRAD_OP", **pg)
    ckpt = args.out / "final.ckpt"
    plugins = None
    if args.resume and is_sharded_checkpoint(args.resume) and isinstance(strategy, str):
        # Lightning's own ddp reads a sharded folder through the bundle's checkpoint IO (the shards joined).
        plugins = [importlib.import_module(f"{bundle.__name__}.checkpoint.io").AtomicCheckpointIO()]
    spawned = start_method == "spawn"  # the fit runs in spawned workers: they save (SaveAtTrainEnd)
    trainer = quiet_trainer(
        namespace=args.namespace,
        callbacks=[save_at_train_end(ckpt, args.namespace)] if spawned else None,
        accelerator=args.accelerator,
        strategy=strategy,
        plugins=plugins,
        devices=args.devices,
        num_nodes=args.num_nodes,
        max_steps=args.steps,
        accumulate_grad_batches=args.accumulate,
        gradient_clip_val=args.clip_val,
        gradient_clip_algorithm=args.clip_algo if args.clip_val else None,
        precision=args.precision,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
    )
    n = args.num_samples or args.global_batch * args.accumulate * args.steps
    model = parity_module_for(args.namespace)(
        optimizer=args.optimizer,
        lr=args.lr,
        manual=args.manual,
        global_batch=args.global_batch,
        num_samples=n,
        **({"hidden": args.hidden} if args.hidden else {}),
    )
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()  # each run of a launch reports its own peak
    trainer.fit(model, ckpt_path=args.resume)
    world = trainer.world_size
    rank = trainer.global_rank
    if args.strategy == "fsdp_shard_grad_op":
        # Memory only: FSDP's flat parameters live on its wrapper (the LightningModule's own are views), and its full
        # gather is not what this peer is run for.
        (args.out / f"memory_rank{rank}.json").write_text(
            json.dumps(_memory(trainer.strategy.model, trainer.optimizers[0]))
        )
        return
    # FSDP2 holds DTensor shards: gather each whole tensor (a collective, on every rank) to compare with other
    # strategies.
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    torch.save({k: v.detach().cpu() for k, v in full.items()}, args.out / f"params_rank{rank}.pt")
    opt = trainer.optimizers[0] if trainer.optimizers else None
    if opt is not None:
        # A sharded optimizer (OSS/ZeRO) holds its rank's shard in a local optimizer.
        torch.save(local_optimizer(opt).state_dict(), args.out / f"optimizer_rank{rank}.pt")
    (args.out / f"memory_rank{rank}.json").write_text(json.dumps(_memory(model, opt)))
    if args.sharded_backend == "fsdp2":  # which full-checkpoint gather the save below takes, and why
        from lightning_mgpu.strategies.fsdp2.state import cuda_backend, gathers_by_hand

        gather = {
            "backend": str(torch.distributed.get_backend()),
            "cuda_backend": cuda_backend(),
            "by_hand": gathers_by_hand(model),
        }
        (args.out / f"gather_rank{rank}.json").write_text(json.dumps(gather))
    if not spawned:
        trainer.save_checkpoint(ckpt)
    if trainer.is_global_zero:
        result = {
            "world_size": world,
            "num_nodes": trainer.num_nodes,
            "global_step": trainer.global_step,
            "trainer": type(trainer).__module__,
            "strategy": type(trainer.strategy).__module__,
            # a sharded folder read in place, each rank what it holds (ShardedStrategy only)
            "restored_in_place": getattr(trainer.strategy, "_restored_in_place", None),
        }
        (args.out / "result.json").write_text(json.dumps(result))


def _memory(model: torch.nn.Module, opt: torch.optim.Optimizer | None) -> dict[str, int]:
    """What this rank holds: its parameters' bytes (its shard under FSDP2), its optimizer state's bytes (its shard
    under ZeRO/OSS), and on CUDA the peak allocated memory of the fit."""

    def nbytes(t: torch.Tensor) -> int:
        local = t.to_local() if hasattr(t, "to_local") else t
        return local.numel() * local.element_size()

    state = local_optimizer(opt).state if opt is not None else {}
    optimizer_bytes = sum(
        nbytes(v) for s in state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    memory = {"param_bytes": sum(nbytes(p) for p in model.parameters()), "optimizer_bytes": optimizer_bytes}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        memory["cuda_peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    return memory


if __name__ == "__main__":
    runs = split_runs(sys.argv[1:])
    if len({parse(run).devices for run in runs}) != 1:  # the ranks launched by the first run serve every run
        raise SystemExit("the runs of one launch must use the same --devices")
    for run in runs:
        main(run)
