"""Real models on one GPU: ResNet-50 and GPT-2 small under every strategy against the same model in a plain torch loop.

Each model is randomly initialised from one seed and trains with AdamW in bf16-mixed on batches already on the device
(so both sides time the model and the strategy, not host-to-device copies). Arms, in interleaved rounds (the order
rotates every round), each a fresh fit of the same model on the same batches:

- ``raw``: a hand-written loop: ``torch.autocast(bfloat16)``, zero_grad, forward, backward, step;
- ``raw_ddp`` and ``raw_fsdp2``: the same loop driving the engine by hand on one rank (torch's DDP; ``fully_shard``
  per block, then the root): what the engine itself costs, strategy or not;
- ``lightning``: ``Trainer(devices=1, precision="bf16-mixed")``, Lightning's single-device strategy;
- ``ddp``, ``dp``, ``sharded_fsdp2`` and ``horovod``: the same Trainer with ``strategy=...`` (sharded_fsdp2:
  ``FSDP2Strategy(fsdp_modules=[the block class])``, the groups the hand arm makes; ``sharded_fsdp2_auto``: the groups
  ``FSDP2Strategy()`` chooses itself (``min_params``); horovod: NCCL when its build has it, one worker, no horovodrun);
- ``monitor``: ``lightning`` with ``GPUUtilizationMonitor`` at its defaults and the FLOPs per sample given (its MFU);
- ``ac`` against ``raw_ac``: ``lightning`` with ``ActivationCheckpointing`` on every block, against the raw loop with
  ``torch.utils.checkpoint`` on every block by hand (recomputation costs the same on both sides);
- ``ac`` against ``lightning_hand_ac``: the same Trainer, the blocks checkpointed by hand instead of by the callback:
  what the callback alone costs, without Lightning's own share (``lightning`` / ``raw``) in the ratio.

Goals: every Lightning arm's median step <= 1.03 x the plain loop's, and x its engine's by hand where it has one. MFU =
the FLOPs of one step (torch's FlopCounterMode on the meta device: matrix products and convolutions) / the median step /
the device's dense bf16 peak (``lightning_mgpu.monitoring.peak_flops``, named in the report).

Run::

    python -m benchmarks.bench_real_models                                 # one CUDA GPU, about 3 minutes on an H100
    python -m benchmarks.bench_real_models --models gpt --arms raw,ddp     # one model, two arms
    python -m benchmarks.bench_real_models --device cpu --size tiny        # the script only (tiny shapes)

On the CPU the figures say nothing about a GPU: the suite runs this benchmark there only at its dry size.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from benchmarks.harness import interleave
from benchmarks.harness.cli import parser
from benchmarks.harness.clock import raw_steps
from benchmarks.harness.memory import peak_since, start_peak
from benchmarks.harness.models import Trainable
from benchmarks.harness.networks import ModelSpec, gpt_spec, resnet_spec, step_flops
from benchmarks.harness.result import figure, ratio, write_result
from benchmarks.harness.stats import median_interval
from benchmarks.harness.trainer import cycled, timed_fit_on_device
from lightning_mgpu.monitoring.peak_flops import dense_peak_flops

GOAL_VS_RAW = 1.03
ARMS = (
    "raw",
    "raw_ddp",
    "raw_fsdp2",
    "raw_ac",
    "lightning",
    "ddp",
    "dp",
    "sharded_fsdp2",
    "sharded_fsdp2_auto",
    "horovod",
    "monitor",
    "ac",
    "lightning_hand_ac",
)
#: Each Lightning arm's peers: the plain loop (the issue's goal), and where the engine itself costs something, the
#: same engine driven by hand (what the strategy adds on top of it).
PEERS = {
    "lightning": ("raw",),
    "ddp": ("raw", "raw_ddp"),
    "dp": ("raw",),
    "sharded_fsdp2": ("raw", "raw_fsdp2"),
    "sharded_fsdp2_auto": ("raw", "raw_fsdp2"),
    "horovod": ("raw",),
    "monitor": ("raw", "lightning"),
    "ac": ("raw_ac", "lightning_hand_ac"),
}
#: The models at each size: full is ResNet-50 on 224x224 and GPT-2 small on 1024 tokens (what the issue names);
#: tiny checks the script on a CPU in seconds.
SIZES: dict[str, dict[str, ModelSpec]] = {
    "full": {"resnet": resnet_spec(batch_size=128), "gpt": gpt_spec(batch_size=16)},
    "tiny": {
        "resnet": resnet_spec(batch_size=4, image=32, layers=(1, 1), width=8),
        "gpt": gpt_spec(batch_size=2, context=32, layers=2, heads=2, dim=32),
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, rounds=3, steps=20, warmup=5)  # the warm-up: cuDNN's autotuner, cuBLAS heuristics, allocator
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--size", default="full", choices=tuple(SIZES))
    p.add_argument("--models", default="resnet,gpt", type=lambda s: [m for m in s.split(",") if m])
    p.add_argument("--arms", default=",".join(ARMS), type=lambda s: [a for a in s.split(",") if a])
    args = p.parse_args(argv)
    for name, chosen, valid in (("arm", args.arms, ARMS), ("model", args.models, tuple(SIZES["full"]))):
        unknown = sorted(set(chosen) - set(valid))
        if unknown:
            p.error(f"unknown {name}(s) {unknown}; choose from {list(valid)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda needs a CUDA GPU; run with --device cpu --size tiny to check the script only.")
    return args


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The repeated units activation checkpointing wraps (both networks keep them in ``blocks``)."""
    return list(model.blocks)  # type: ignore[arg-type]


def checkpoint_blocks_by_hand(model: nn.Module) -> None:
    """The raw peer of ``ActivationCheckpointing``: every block's forward through non-reentrant
    ``torch.utils.checkpoint``, as a user writes it without the callback."""
    for block in blocks_of(model):
        forward = block.forward
        block.forward = lambda *a, _f=forward: checkpoint(_f, *a, use_reentrant=False)  # type: ignore[method-assign]


def wrap_by_hand(model: nn.Module, arm: str, device: torch.device) -> nn.Module:
    """The engine a raw loop drives by hand on one rank: torch's DDP, or ``fully_shard`` per block then the root.

    The one-process group is made here if no earlier fit left one (Lightning's ddp keeps its group after a fit, and
    this reuses it, as Lightning reuses this one).
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        from lightning.fabric.plugins.environments.lightning import find_free_network_port

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(find_free_network_port())
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    if arm == "raw_ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (1,))
    for block in blocks_of(model):
        fully_shard(block, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model


def lightning_arm(
    args: argparse.Namespace, spec: ModelSpec, arm: str, batches: list, device: torch.device
) -> tuple[float, int]:
    """One fit under the arm's strategy: its median step seconds and peak memory."""
    from lightning_mgpu.callbacks import ActivationCheckpointing, GPUUtilizationMonitor
    from lightning_mgpu.strategies import FSDP2Strategy

    block = spec.block
    # The callbacks on Lightning's single-device strategy, against the plain loop: their own cost, no engine's.
    strategy: Any = "auto" if arm in ("lightning", "monitor", "ac", "lightning_hand_ac") else arm
    if arm == "sharded_fsdp2":
        # One group per block (and the root), as a user of FSDP shards a ResNet or a GPT, not one per layer.
        strategy = FSDP2Strategy(fsdp_modules=[block])
    if arm == "sharded_fsdp2_auto":
        strategy = FSDP2Strategy()  # the groups a user who names none gets
    callbacks: list[Any] = []
    if arm == "monitor":
        callbacks.append(GPUUtilizationMonitor(flops_per_sample=args.flops[spec.name] / spec.batch_size))
    if arm == "ac":
        callbacks.append(ActivationCheckpointing(modules=[block]))
    base = start_peak(device)
    network = spec.build()
    if arm == "lightning_hand_ac":
        checkpoint_blocks_by_hand(network)  # the callback's peer under the same Trainer
    model = Trainable(network, spec.loss, lambda params: torch.optim.AdamW(params, lr=1e-4))
    clock = timed_fit_on_device(
        model,
        batches,
        warmup=args.warmup,
        steps=args.steps,
        device=device,
        callbacks=callbacks,
        strategy=strategy,
        precision="bf16-mixed",
        # The monitor writes its diagnosis under the log folder; the other arms log nothing.
        default_root_dir=args.root_dir,
    )
    peak = peak_since(base, device)
    return median_interval(clock.marks, args.warmup, args.steps), peak


def autocast_step(
    spec: ModelSpec, model: nn.Module, device: torch.device
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One plain-loop training step of ``model`` with AdamW in bf16 autocast, in Lightning's order (zero_grad, forward,
    backward, step): the raw peer every Lightning arm is measured against."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = spec.loss(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def raw_arm(
    args: argparse.Namespace, spec: ModelSpec, arm: str, batches: list, device: torch.device
) -> tuple[float, int]:
    """The same steps in a hand-written autocast loop, in Lightning's order (zero_grad, forward, backward, step)."""
    base = start_peak(device)
    model = spec.build().to(device)
    if arm == "raw_ac":
        checkpoint_blocks_by_hand(model)
    if arm in ("raw_ddp", "raw_fsdp2"):
        model = wrap_by_hand(model, arm, device)
    step = autocast_step(spec, model, device)
    count = args.warmup + args.steps + 1
    marks = raw_steps(step, cycled(batches, count), count, device)[0]
    peak = peak_since(base, device)
    return median_interval(marks, args.warmup, args.steps), peak


def horovod_missing() -> str | None:
    """Why the horovod arm cannot run here, or ``None``."""
    if importlib.util.find_spec("horovod") is None:
        return "horovod is not installed (python -m lightning_mgpu build-horovod --gpu)"
    return None


def main(argv: list[str] | None = None) -> None:
    import tempfile

    args = parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True  # both sides: the convolutions' fastest kernels, chosen in the warm-up
    args.root_dir = tempfile.mkdtemp(prefix="bench_real_models_")
    specs = {key: SIZES[args.size][key] for key in args.models}
    args.flops = {spec.name: step_flops(spec) for spec in specs.values()}
    skipped = {"horovod": why} if "horovod" in args.arms and (why := horovod_missing()) else {}
    arms = [a for a in args.arms if a not in skipped]
    peaks: dict[str, int] = {}
    failed: dict[str, str] = dict(skipped)

    def run(spec: ModelSpec, batches: list, arm: str) -> float:
        key = f"{spec.name}: {arm}"
        try:
            if arm.startswith("raw"):
                seconds, peaks[key] = raw_arm(args, spec, arm, batches, device)
            else:
                seconds, peaks[key] = lightning_arm(args, spec, arm, batches, device)
        except Exception as err:  # one arm's failure is reported as such, never as a number
            failed[key] = f"{type(err).__name__}: {err}"
            return float("nan")
        return seconds

    times: dict[str, list[float]] = {}
    for spec in specs.values():
        g = torch.Generator().manual_seed(1)
        # Four distinct batches on the device, cycled.
        batches = [tuple(t.to(device) for t in spec.batch(spec.batch_size, g)) for _ in range(4)]
        per_arm = interleave(
            {arm: (lambda arm=arm, spec=spec, batches=batches: run(spec, batches, arm)) for arm in arms}, args.rounds
        )
        times |= {f"{spec.name}: {arm}": t for arm, t in per_arm.items()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak_flops = dense_peak_flops(device, torch.bfloat16)
    ratios, figures = [], {}
    for spec in specs.values():
        for arm, peers in PEERS.items():
            for peer in peers:
                num, den = f"{spec.name}: {arm}", f"{spec.name}: {peer}"
                if num in times and den in times:
                    ratios.append(ratio(f"{spec.name}: {arm} / {peer} step time", num, den, goal=GOAL_VS_RAW))
        for arm in arms:
            key = f"{spec.name}: {arm}"
            finite = [t for t in times.get(key, []) if t == t]
            if not finite:
                continue
            step_s = statistics.median(finite)
            figures[f"{key}: samples/s"] = figure(round(spec.batch_size / step_s, 1), higher_is_better=True)
            if peak_flops:
                figures[f"{key}: MFU"] = figure(
                    round(args.flops[spec.name] / step_s / peak_flops, 3), higher_is_better=True
                )
    write_result(
        args.result,
        name="real_models",
        arms={key: {"step_s": t} for key, t in times.items()},
        ratios=ratios,
        figures=figures,
        memory={key: [float(v)] for key, v in peaks.items()} if device.type == "cuda" else None,
        memory_label="peak memory allocated during the fit, above what was allocated before it (the batches)",
        failed=failed,
        config={k: v for k, v in vars(args).items() if k not in ("result", "flops", "root_dir")}
        | {
            "device_name": name,
            "peak_flops_bf16_dense": peak_flops,
            "flops_per_step": args.flops,
            "models": {s.name: f"batch {s.batch_size} {s.unit}" for s in specs.values()},
        },
        notes=[
            "MFU: FLOPs per step from torch's FlopCounterMode (Lightning's measure_flops) on the meta device, over the"
            f" median step and the dense bf16 peak of {name}"
            + (f" ({peak_flops / 1e12:.1f} TFLOP/s, lightning_mgpu.monitoring.peak_flops)." if peak_flops else "."),
        ],
    )


if __name__ == "__main__":
    main(sys.argv[1:])
