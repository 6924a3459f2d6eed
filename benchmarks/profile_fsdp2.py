"""Where a step's host time goes: ``sharded_fsdp2`` against ``fully_shard`` driven by hand, under ``torch.profiler``.

A GPU step is short enough that the host's work per step (FSDP2's per-group hooks, the optimizer's Python, Lightning's
loop) can decide its length; this splits that work into families, per step, for each arm, side by side:

- ``fsdp hooks``: FSDP2's own ranges (``FSDP::pre_forward``, ``FSDP::post_backward_reduce``, ...);
- ``optimizer``: ``Optimizer.step`` and ``Optimizer.zero_grad``;
- ``forward``: the model's forward and the loss (a range of ours around them);
- ``backward``: ``loss.backward()`` (a range of ours; on a GPU the main thread waits there for the autograd thread).

Each moment counts once, for the innermost of these ranges around it; the rest of the step is ``other`` (Lightning's
loop and hooks, Python between ops).

Arms (one rank, one process group of one, the same model, batches and AdamW):

- ``raw_fsdp2``: ``fully_shard`` per block then the root, by hand, in a plain autocast loop;
- ``sharded_fsdp2``: ``Trainer(strategy=FSDP2Strategy(fsdp_modules=...))`` with the same blocks;
- ``sharded_fsdp2_default``: the strategy's default grouping (what a user who names no blocks gets; ``--min-params``);
- ``sharded_fsdp2_per_module``: a group for every module holding parameters (the default before ``min_params``).

Run::

    python -m benchmarks.profile_fsdp2 --device cpu --model resnet_tiny   # host overhead on the CPU, in seconds
    python -m benchmarks.profile_fsdp2 --device cuda --model resnet       # on a GPU: ResNet-50, batch 128
    python -m benchmarks.profile_fsdp2 --model small_modules              # many tiny layers (pytorch#173680's shape)

On the CPU a tiny batch keeps the kernels short, so that the host's share shows as it does on a fast GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from benchmarks.bench_real_models import wrap_by_hand
from benchmarks.harness.models import Trainable
from benchmarks.harness.networks import ModelSpec, gpt_spec, resnet_spec
from benchmarks.harness.trainer import cycled

ARMS = ("raw_fsdp2", "sharded_fsdp2", "sharded_fsdp2_default", "sharded_fsdp2_per_module")


class SmallBlock(nn.Module):
    """A block of many small layers: Linear, LayerNorm and a gate, each a few thousand parameters."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim)) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + torch.relu(layer(x))
        return x


class SmallModules(nn.Module):
    def __init__(self, dim: int = 64, blocks: int = 8, classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(32, dim)
        self.blocks = nn.Sequential(*(SmallBlock(dim) for _ in range(blocks)))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.inp(x)))


def small_modules_spec(batch_size: int) -> ModelSpec:
    def batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g)

    return ModelSpec(
        "small modules", SmallModules, batch, nn.functional.cross_entropy, batch_size, "vectors", SmallBlock
    )


MODELS: dict[str, Callable[[], ModelSpec]] = {
    "resnet": lambda: resnet_spec(batch_size=128),
    "gpt": lambda: gpt_spec(batch_size=16),
    # ResNet-50's depth and its 53 BatchNorm layers at a width and image size the CPU runs in milliseconds.
    "resnet_tiny": lambda: resnet_spec(batch_size=2, image=32, width=4),
    "small_modules": lambda: small_modules_spec(batch_size=8),
}


FORWARD = "step::forward_and_loss"
BACKWARD = "step::backward"


def family(name: str) -> str | None:
    if name.startswith("FSDP::"):
        return "fsdp hooks"
    if name.startswith(("Optimizer.step", "Optimizer.zero_grad")):
        return "optimizer"
    if name == BACKWARD:
        return "backward"
    if name == FORWARD:
        return "forward"
    return None


def summarize(prof: Any, steps: int, wall_s: float) -> dict[str, Any]:
    """Host milliseconds per step by family, and the top events.

    Only the main thread's events count, each moment for the innermost family range around it: Lightning runs the
    forward and backward inside ``Optimizer.step`` (its closure), and FSDP's hooks run inside both, so nothing counts
    twice. On a GPU the autograd engine runs the backward on a thread of its own (FSDP's post-backward hooks too), and
    the main thread's wait for it is ``backward``. What no range holds (Lightning's loop, callbacks' hooks, Python
    between ops) is ``other``.
    """
    main = {e.thread for e in prof.events() if e.name == FORWARD}
    per_family: dict[str, float] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU or e.thread not in main:
            continue
        node, fam = e, None
        while node is not None and fam is None:
            fam = family(node.name)
            node = node.cpu_parent
        if fam is not None:
            per_family[fam] = per_family.get(fam, 0.0) + e.self_cpu_time_total / 1e3 / steps
    step_ms = wall_s * 1e3 / steps
    per_family["other"] = step_ms - sum(per_family.values())
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    return {"step_ms": step_ms, "families_ms": per_family, "top": table}


def raw_profile(spec: ModelSpec, batches: list, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    model = wrap_by_hand(spec.build().to(device), "raw_fsdp2", device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed"):
            with torch.profiler.record_function(FORWARD):
                loss = spec.loss(model(x), y)
        with torch.profiler.record_function(BACKWARD):
            loss.backward()
        optimizer.step()

    for i in range(args.warmup):
        step(*batches[i % len(batches)])
    sync(device)
    with profiler(device) as prof:
        start = time.perf_counter()
        for i in range(args.steps):
            step(*batches[i % len(batches)])
        sync(device)
        wall = time.perf_counter() - start
    return summarize(prof, args.steps, wall)


def lightning_profile(
    spec: ModelSpec, batches: list, args: argparse.Namespace, device: torch.device, arm: str
) -> dict[str, Any]:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from lightning_mgpu.strategies import FSDP2Strategy

    class Window(pl.Callback):
        """Profiles batches [warmup, warmup + steps) from the first batch's start to the last one's end."""

        def __init__(self) -> None:
            self.prof: Any = None
            self.start = self.wall = 0.0

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == args.warmup:
                sync(device)
                self.prof = profiler(device)
                self.prof.__enter__()
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == args.warmup + args.steps - 1:
                sync(device)
                self.wall = time.perf_counter() - self.start
                self.prof.__exit__(None, None, None)

    window = Window()

    class Ranged(Trainable):
        def training_step(self, *a: Any, **kw: Any) -> Any:
            with torch.profiler.record_function(FORWARD):
                return super().training_step(*a, **kw)

        def backward(self, loss: torch.Tensor, *a: Any, **kw: Any) -> None:
            with torch.profiler.record_function(BACKWARD):
                super().backward(loss, *a, **kw)

    if arm == "sharded_fsdp2_default":
        strategy = FSDP2Strategy() if args.min_params is None else FSDP2Strategy(min_params=args.min_params)
    elif arm == "sharded_fsdp2_per_module":
        strategy = FSDP2Strategy(fsdp_modules=[lambda m: any(True for _ in m.parameters(recurse=False))])
    else:
        strategy = FSDP2Strategy(fsdp_modules=[spec.block])
    model = Ranged(spec.build(), spec.loss, lambda params: torch.optim.AdamW(params, lr=1e-4))
    loader = DataLoader(cycled(batches, args.warmup + args.steps), batch_size=None)
    trainer = pl.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        strategy=strategy,
        precision=args.precision,
        max_steps=args.warmup + args.steps,
        callbacks=[window],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=args.root_dir,
    )
    trainer.fit(model, loader)
    return summarize(window.prof, args.steps, window.wall)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profiler(device: torch.device) -> Any:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities)


def main(argv: list[str] | None = None) -> None:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    p.add_argument("--model", default="resnet_tiny", choices=tuple(MODELS))
    p.add_argument("--arms", default=",".join(ARMS), type=lambda s: [a for a in s.split(",") if a])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument(
        "--precision", default=None, choices=("bf16-mixed", "32-true"), help="bf16-mixed on a GPU, 32-true on the CPU"
    )
    p.add_argument("--min-params", type=int, default=None, help="sharded_fsdp2_default's min_params")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--tables", action="store_true", help="print each arm's top events (torch.profiler's table)")
    args = p.parse_args(argv)
    unknown = sorted(set(args.arms) - set(ARMS))
    if unknown:
        p.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    device = torch.device(args.device)
    # The CPU's bf16 convolutions are reference kernels, slow enough to hide the host work this measures.
    args.precision = args.precision or ("bf16-mixed" if device.type == "cuda" else "32-true")
    torch.backends.cudnn.benchmark = True
    args.root_dir = tempfile.mkdtemp(prefix="profile_fsdp2_")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    spec = MODELS[args.model]()
    g = torch.Generator().manual_seed(1)
    batches = [tuple(t.to(device) for t in spec.batch(spec.batch_size, g)) for _ in range(4)]
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in args.arms}
    for r in range(args.rounds):
        order = args.arms[r % len(args.arms) :] + args.arms[: r % len(args.arms)]
        for arm in order:
            if arm == "raw_fsdp2":
                results[arm].append(raw_profile(spec, batches, args, device))
            else:
                results[arm].append(lightning_profile(spec, batches, args, device, arm))
    families = sorted({f for runs in results.values() for run in runs for f in run["families_ms"]})
    out: dict[str, Any] = {"model": spec.name, "device": str(device), "arms": {}}
    header = f"{'arm':24s} {'step ms':>9s} " + " ".join(f"{f:>16s}" for f in families)
    lines = [f"{spec.name} on {device}: host milliseconds per step (median of {args.rounds} rounds)", header]
    for arm, runs in results.items():
        med = {f: statistics.median(run["families_ms"].get(f, 0.0) for run in runs) for f in families}
        step = statistics.median(run["step_ms"] for run in runs)
        out["arms"][arm] = {"step_ms": step, "families_ms": med}
        lines.append(f"{arm:24s} {step:9.2f} " + " ".join(f"{med[f]:16.2f}" for f in families))
        if args.tables:
            lines.append(runs[-1]["top"])
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
