"""Mixed precision on a GPU: bf16 and fp16 against fp32 (and TF32), achieved TFLOPS, and AutoMixedPrecision's cost.

A stack of transformer MLP blocks (``LayerNorm -> Linear(d, 4d) -> GELU -> Linear(4d, d)``, residual) trains with
AdamW on batches already on the device, so the matrix units set the pace and not the input pipeline. Arms, run in
interleaved rounds (the order rotates every round), each a fresh fit of the same seeded model on the same batches:

- ``fp32``: ``Trainer(precision="32-true")`` with torch's default float32 matmuls (no TF32);
- ``tf32``: the same with ``torch.set_float32_matmul_precision("high")``, which Lightning suggests on Ampere+;
- ``bf16`` / ``fp16``: ``Trainer(precision="bf16-mixed" / "16-mixed")`` with ``AutoMixedPrecision`` monitoring
  (under fp16 it reads the GradScaler at every step and logs the loss scale on Lightning's logging steps);
- ``bf16_plain`` / ``fp16_plain``: the same Trainer without the callback, which separates its cost from Lightning's;
- ``raw_bf16`` / ``raw_fp16``: a hand-written loop with ``torch.autocast`` (and a ``GradScaler`` for fp16), the raw
  peer of the mixed arms: Lightning plus the callback against it should cost <= 3 %.

Achieved TFLOPS = the FLOPs of one training step (counted once by torch's FlopCounterMode on the meta device, through
Lightning's ``measure_flops``) / the median step time. The fraction of the device's dense peak uses the datasheet
peak for the arm's matmul dtype (``lightning_mgpu.monitoring.peak_flops``: Lightning's own table lists the H200 with
sparsity, under names CUDA does not report).

Run::

    python -m benchmarks.bench_amp                                # one CUDA GPU, about a minute on an H100
    python -m benchmarks.bench_amp --width 4096 --tokens 16384    # larger matmuls: nearer the peak
    # the script only, on the CPU:
    python -m benchmarks.bench_amp --device cpu --arms fp32,fp16,raw_fp16 --width 64 --depth 2 --tokens 64

On the CPU the figures say nothing about a GPU: the suite runs this benchmark there only at its dry size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import torch
from torch import nn

from benchmarks.harness import interleave
from benchmarks.harness.cli import parser
from benchmarks.harness.clock import raw_steps
from benchmarks.harness.memory import peak_since, start_peak
from benchmarks.harness.models import Trainable
from benchmarks.harness.result import figure, ratio, write_result
from benchmarks.harness.stats import median_interval
from benchmarks.harness.trainer import cycled, timed_fit_on_device
from lightning_mgpu.callbacks import AutoMixedPrecision
from lightning_mgpu.monitoring.peak_flops import dense_peak_flops

#: Lightning plus the callback against the same autocast loop written by hand, as for every strategy.
GOAL_VS_RAW = 1.03
#: The Lightning precision of each arm, and the dtype its matrix products run in (for the peak).
PRECISION = {
    "fp32": ("32-true", torch.float32),
    "tf32": ("32-true", "tfloat32"),
    "bf16": ("bf16-mixed", torch.bfloat16),
    "fp16": ("16-mixed", torch.float16),
}
ARMS = ("fp32", "tf32", "bf16", "fp16", "bf16_plain", "fp16_plain", "raw_bf16", "raw_fp16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, rounds=5, steps=10, warmup=3, width=2048)  # the warm-up: cuBLAS heuristics, the allocator
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--arms", default=",".join(ARMS), type=lambda s: [a for a in s.split(",") if a])
    p.add_argument("--depth", default=6, type=int, help="MLP blocks of d -> 4d -> d (d: --width)")
    p.add_argument("--tokens", default=8192, type=int, help="rows per batch")
    args = p.parse_args(argv)
    unknown = sorted(set(args.arms) - set(ARMS))
    if unknown:
        p.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda needs a CUDA GPU; run with --device cpu to check the script only.")
    return args


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def build_model(args: argparse.Namespace) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*(Block(args.width) for _ in range(args.depth)))


def make_batches(args: argparse.Namespace, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    # Four distinct batches, cycled: on the device already, so both sides time the model, not host-to-device copies.
    batches = [
        (torch.randn(args.tokens, args.width, generator=g), torch.randn(args.tokens, args.width, generator=g))
        for _ in range(4)
    ]
    return [(x.to(device), y.to(device)) for x, y in batches]


def mse_fp32(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss in fp32 whatever the output's dtype, in every arm."""
    return nn.functional.mse_loss(out.float(), y)


def step_flops(args: argparse.Namespace) -> int:
    """FLOPs of one forward + backward, counted on the meta device (no memory, no time)."""
    from lightning.fabric.utilities.throughput import measure_flops

    with torch.device("meta"):
        model, x, y = build_model(args), torch.empty(args.tokens, args.width), torch.empty(args.tokens, args.width)
    return int(measure_flops(model, lambda: model(x), lambda out: nn.functional.mse_loss(out, y)))


def lightning_arm(
    args: argparse.Namespace, arm: str, batches: list, device: torch.device
) -> tuple[float, int, dict[str, Any]]:
    """One fit: the median step seconds, the peak memory (CUDA) and what the callback counted."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    precision = PRECISION[arm.removesuffix("_plain")][0]
    torch.set_float32_matmul_precision("high" if arm == "tf32" else "highest")
    # AutoMixedPrecision monitors the explicit plugin: it counts fp16's skipped steps and logs the scale.
    amp = AutoMixedPrecision() if precision != "32-true" and not arm.endswith("_plain") else None
    # fp16 through its plugin, as Lightning builds it on CUDA: Lightning turns precision="16-mixed" into bf16 on a CPU.
    plugins = (
        [MixedPrecision("16-mixed", device.type, scaler=torch.amp.GradScaler(device.type))]
        if precision == "16-mixed"
        else []
    )
    base = start_peak(device)
    model = Trainable(build_model(args), mse_fp32, lambda params: torch.optim.AdamW(params, lr=1e-4))
    clock = timed_fit_on_device(
        model,
        batches,
        warmup=args.warmup,
        steps=args.steps,
        device=device,
        callbacks=[amp] if amp else [],
        plugins=plugins,
        precision=None if plugins else precision,
    )
    peak = peak_since(base, device)
    counted = {"optimizer_steps": amp.optimizer_steps, "skipped_steps": amp.skipped_steps} if amp is not None else {}
    torch.set_float32_matmul_precision("highest")
    return median_interval(clock.marks, args.warmup, args.steps), peak, counted


def raw_arm(args: argparse.Namespace, arm: str, batches: list, device: torch.device) -> tuple[float, int]:
    """The same steps in a hand-written autocast loop: Lightning's order (zero_grad, forward, backward, step)."""
    dtype = PRECISION[arm.removeprefix("raw_")][1]
    base = start_peak(device)  # before the model, as the Lightning arm's fit moves its model within the peak
    model = build_model(args).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            loss = mse_fp32(model(x), y)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    count = args.warmup + args.steps + 1
    marks = raw_steps(step, cycled(batches, count), count, device)[0]
    peak = peak_since(base, device)
    return median_interval(marks, args.warmup, args.steps), peak


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    batches = make_batches(args, device)
    flops = step_flops(args)
    peaks: dict[str, int] = {}
    counted: dict[str, dict[str, Any]] = {}

    def run(arm: str) -> float:
        if arm.startswith("raw_"):
            seconds, peaks[arm] = raw_arm(args, arm, batches, device)
        else:
            seconds, peaks[arm], counted[arm] = lightning_arm(args, arm, batches, device)
        return seconds

    times = interleave({arm: (lambda arm=arm: run(arm)) for arm in args.arms}, args.rounds)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    ratios, figures = [], {}
    for arm in ("tf32", "bf16", "fp16"):
        if arm in times and "fp32" in times:
            ratios.append(ratio(f"{arm} / fp32 step time (Lightning)", arm, "fp32"))
    for arm in ("bf16", "fp16"):
        if arm in times and f"raw_{arm}" in times:
            ratios.append(
                ratio(f"{arm}: Lightning + AutoMixedPrecision / raw autocast loop", arm, f"raw_{arm}", goal=GOAL_VS_RAW)
            )
        if arm in times and f"{arm}_plain" in times:
            ratios.append(ratio(f"{arm}: AutoMixedPrecision / the same Trainer without it", arm, f"{arm}_plain"))
    for arm in args.arms:
        achieved = flops / statistics.median(times[arm])
        peak = dense_peak_flops(device, PRECISION[arm.removeprefix("raw_").removesuffix("_plain")][1])
        figures[f"{arm}: achieved TFLOPS"] = figure(float(f"{achieved / 1e12:.3g}"), higher_is_better=True)
        if peak:
            figures[f"{arm}: share of {name}'s dense peak ({peak / 1e12:.0f} TFLOPS)"] = figure(
                round(achieved / peak, 3), higher_is_better=True
            )
    if "fp16" in counted:
        figures["fp16: optimizer steps the GradScaler skipped (AutoMixedPrecision's count, last run)"] = figure(
            counted["fp16"]["skipped_steps"]
        )
    write_result(
        args.result,
        name="amp",
        arms={arm: {"step_s": t} for arm, t in times.items()},
        ratios=ratios,
        figures=figures,
        memory={arm: [float(peaks[arm])] for arm in args.arms} if device.type == "cuda" else None,
        memory_label="peak memory allocated during the fit, above what was allocated before it (the batches)",
        config={k: v for k, v in vars(args).items() if k != "result"} | {"device_name": name, "flops_per_step": flops},
        notes=[
            "FLOPs per step from torch's FlopCounterMode (Lightning's measure_flops) on the meta device; the peak is"
            " the dense datasheet figure for the arm's matmul dtype."
        ],
    )


if __name__ == "__main__":
    main(sys.argv[1:])
