"""Where ``ActivationCheckpointing`` and ``torch.utils.checkpoint`` by hand differ: the same model, batches and AdamW in
one plain loop, with every block checkpointed by hand (``hand``) or by the callback's ``apply`` (``callback``, no
Lightning), and the callback under a Trainer (``lightning``), in interleaved rounds; then torch.profiler's kernels and
host ops of one window of each plain-loop arm, side by side (a kernel or an op one arm runs and the other does not).

Run::

    python -m benchmarks.profile_activation_checkpointing --model gpt --rounds 5       # one GPU
    python -m benchmarks.profile_activation_checkpointing --device cpu --model tiny    # the script only
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from typing import Any

import torch
from torch import nn

from benchmarks.bench_real_models import autocast_step, checkpoint_blocks_by_hand
from benchmarks.harness.models import Trainable
from benchmarks.harness.networks import ModelSpec, gpt_spec, resnet_spec
from lightning_mgpu.callbacks import ActivationCheckpointing

MODELS = {
    "gpt": lambda: gpt_spec(batch_size=16),
    "resnet": lambda: resnet_spec(batch_size=128),
    "tiny": lambda: gpt_spec(batch_size=2, context=32, layers=2, heads=2, dim=32),
}


def plain_loop(spec: ModelSpec, arm: str, device: torch.device) -> tuple[nn.Module, Any]:
    model = spec.build().to(device)
    if arm == "hand":
        checkpoint_blocks_by_hand(model)
    else:
        ActivationCheckpointing(modules=[spec.block]).apply(model)
    return model, autocast_step(spec, model, device)


def timed(step: Any, batches: list, warmup: int, steps: int, device: torch.device) -> float:
    times = []
    for i in range(warmup + steps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step(*batches[i % len(batches)])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:])


def lightning_arm(spec: ModelSpec, batches: list, warmup: int, steps: int, device: torch.device) -> float:
    from benchmarks.harness.stats import median_interval
    from benchmarks.harness.trainer import timed_fit_on_device

    model = Trainable(spec.build(), spec.loss, lambda params: torch.optim.AdamW(params, lr=1e-4))
    clock = timed_fit_on_device(
        model,
        batches,
        warmup=warmup,
        steps=steps,
        device=device,
        callbacks=[ActivationCheckpointing(modules=[spec.block])],
        precision="bf16-mixed",
    )
    return median_interval(clock.marks, warmup, steps)


def events(step: Any, batches: list, device: torch.device) -> tuple[Counter, Counter]:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(3):
            step(*batches[i % len(batches)])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    kernels: Counter = Counter()
    ops: Counter = Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name[:90]] += 1
        elif e.name.startswith("aten::"):
            ops[e.name] += 1
    return kernels, ops


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", default="gpt", choices=tuple(MODELS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=15)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    spec = MODELS[args.model]()
    g = torch.Generator().manual_seed(1)
    batches = [tuple(t.to(device) for t in spec.batch(spec.batch_size, g)) for _ in range(4)]
    arms = ["hand", "callback", "lightning"]
    times: dict[str, list[float]] = {a: [] for a in arms}
    for r in range(args.rounds):
        for arm in arms[r % 3 :] + arms[: r % 3]:
            if arm == "lightning":
                times[arm].append(lightning_arm(spec, batches, args.warmup, args.steps, device))
            else:
                times[arm].append(timed(plain_loop(spec, arm, device)[1], batches, args.warmup, args.steps, device))
    out = [f"{spec.name} on {device}, median step of {args.rounds} rounds (per-round ratio to hand: median, min-max)"]
    for arm in arms:
        ratios = [t / h for t, h in zip(times[arm], times["hand"])]
        out.append(
            f"  {arm:10s} {statistics.median(times[arm]) * 1e3:8.2f} ms   x{statistics.median(ratios):.3f}"
            f" ({min(ratios):.3f}-{max(ratios):.3f})"
        )
    counted = {arm: events(plain_loop(spec, arm, device)[1], batches, device) for arm in ("hand", "callback")}
    for i, kind in enumerate(("kernels", "host ops")):
        hand, callback = counted["hand"][i], counted["callback"][i]
        diff = {k: (hand[k], callback[k]) for k in set(hand) | set(callback) if hand[k] != callback[k]}
        out.append(f"{kind} over 3 steps: hand {sum(hand.values())}, callback {sum(callback.values())}; differing:")
        out += [f"  {k}: hand {a}, callback {b}" for k, (a, b) in sorted(diff.items(), key=lambda kv: kv[0])[:40]]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
