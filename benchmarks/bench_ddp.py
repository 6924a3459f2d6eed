"""Step time of Lightning's ``ddp`` (with the bundle's callbacks' defaults: none) against a raw torch DDP loop.

Two ranks (gloo on CPU, NCCL on 2 GPUs) run both arms in interleaved rounds in the same pair of processes (the order
alternates each round): Lightning sees an external launch (``LOCAL_RANK``/``WORLD_SIZE`` set) and starts nothing
itself. A run's figure is the median step time over its timed steps; the ratio is the median of per-round ratios.
The raw loop is the one from torch's DDP tutorial: same model, data, sampler, batch, optimizer and seed.

    $ python -m benchmarks.bench_ddp                       # about a minute on 2 idle cores
    $ python -m benchmarks.bench_ddp --rounds 9 --steps 30 --hidden 2048

Communication efficiency (the raw loop's rounds): (DDP step - the same step under ``no_sync()``) / one all-reduce of
the gradients' bytes as a flat buffer. At most 1.0: DDP's bucketed all-reduce should cost no more than the same bytes
in one call, and less where it overlaps with backward. Three more raw arms say where the difference goes, through DDP's
communication hooks (the same reducer, buckets and copies; only what is done with each bucket changes):

- ``raw_no_comm``: each bucket is handed back unreduced. Its step minus the no-sync step is DDP's bookkeeping
  (bucket copies, autograd hooks) without any communication.
- ``raw_blocking``: each bucket is all-reduced inside the hook, which waits for it, so nothing overlaps backward.
  Its step minus DDP's step is what overlap hid; divided by the flat all-reduce, the share of it that was hidden.
- ``raw_bucket_view``: DDP with ``gradient_as_bucket_view=True`` (gradients live in the buckets: no copy in or out),
  which a user gets with ``Trainer(strategy=DDPStrategy(gradient_as_bucket_view=True))``; its efficiency is reported
  too.

Where Lightning's extra time goes: both loops time each step's body, the same work in both (zero_grad, forward,
backward, the optimizer step; in Lightning, from ``training_step`` to the end of ``optimizer_step``), so the
difference splits into the body and what lies around it (the data fetch, hooks, Lightning's loop and broadcast).

A third arm adds ``SaveOnInterrupt`` (what ``examples/train.py`` installs): its one-element all-reduce per step
replaces Lightning's per-step SIGTERM broadcast instead of adding to it, so it should cost nothing over plain ``ddp``.

Goal: ddp / raw DDP <= 1.03. Lightning's own loop costs a fixed time per step (hooks, closure, progress; see
``bench_dp.py``'s bare-Lightning / raw-torch arm) plus, since 2.5, one blocking broadcast per step: at the default
step of about 25 ms on a 2-core CPU that is above the goal, and the report gives the fixed cost in ms, in the body and
around it. ``ddp_spawn`` runs the same DDP step in spawned workers; its start-up, not its step, is what differs, and
this benchmark does not measure it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import ProcessFailure, finish_rank, interleave, run_ranks
from benchmarks.harness.cli import config, parser
from benchmarks.harness.clock import now, raw_steps, timed
from benchmarks.harness.result import figure, ratio, write_result
from benchmarks.harness.stats import median_duration, median_interval

WORLD = 2
#: The raw loop's figures besides its step: see the module docstring.
RAW_PARTS = ("raw_no_sync", "raw_no_comm", "raw_blocking", "raw_bucket_view", "allreduce")


IN_BODY = "ddp - raw DDP, per step, in the step's body (zero_grad, forward, backward, optimizer step), ms"
AROUND_BODY = "ddp - raw DDP, per step, around the body (data, hooks, Lightning's loop), ms"


def overhead_figures(times: dict[str, list[float]]) -> dict[str, float]:
    """Where Lightning's extra time per step goes: the same body in both loops, and everything around it (ms; the
    median over rounds, each figure taken within one round)."""
    rounds = list(zip(times["ddp"], times["ddp_body"], times["raw"], times["raw_body"]))
    return {
        IN_BODY: statistics.median((db - rb) * 1e3 for _, db, _, rb in rounds),
        AROUND_BODY: statistics.median(((d - db) - (r - rb)) * 1e3 for d, db, r, rb in rounds),
    }


EFFICIENCY = "communication efficiency: (DDP step - no-sync step) / all-reduce of the gradient bytes"
BOOKKEEPING = "DDP's bookkeeping without communication: (no-comm hook step - no-sync step), ms"
BUCKETED = "DDP's all-reduce / the same bytes in one call: (DDP step - no-comm hook step) / all-reduce"
HIDDEN = "all-reduce hidden behind backward: (blocking hook step - DDP step) / all-reduce"
EFFICIENCY_VIEW = "communication efficiency with gradient_as_bucket_view=True"


def communication_figures(times: dict[str, list[float]]) -> dict[str, float]:
    """Where DDP's communication time goes, from the raw loop's rounds (seconds per step): the median over rounds of
    each figure, every figure taken within one round.

    ``EFFICIENCY`` <= 1 means DDP exposes no more than one flat all-reduce of its gradients; it splits into DDP's own
    bookkeeping (``BOOKKEEPING``, in ms), its bucketed all-reduce against the flat one (``BUCKETED``), less what
    overlapping with backward hid (``HIDDEN``, 0 when nothing overlapped). ``EFFICIENCY_VIEW`` is the efficiency of
    DDP with ``gradient_as_bucket_view=True``.
    """
    rounds = list(
        zip(times["raw"], times["raw_no_sync"], times["raw_no_comm"], times["raw_blocking"], times["allreduce"])
    )
    return {
        EFFICIENCY: statistics.median((s - n) / a for s, n, _, _, a in rounds),
        BOOKKEEPING: statistics.median((c - n) * 1e3 for _, n, c, _, _ in rounds),
        BUCKETED: statistics.median((s - c) / a for s, _, c, _, a in rounds),
        HIDDEN: statistics.median((b - s) / a for s, _, _, b, a in rounds),
        EFFICIENCY_VIEW: statistics.median(
            (v - n) / a for v, n, a in zip(times["raw_bucket_view"], times["raw_no_sync"], times["allreduce"])
        ),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser(__doc__, accelerator="cpu", rounds=7, steps=20, warmup=3, batch_size=64, hidden=1024, threads=1)
    p.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


class Body:
    """Times each step's body, the same work in both loops: zero_grad, forward, backward and the optimizer step."""

    def __init__(self, device: Any) -> None:
        self.device, self.starts, self.ends = device, [], []

    def begin(self) -> None:
        self.starts.append(now(self.device))

    def end(self) -> None:
        self.ends.append(now(self.device))

    def median(self, args: argparse.Namespace) -> float:
        return median_duration(self.starts[: args.warmup + args.steps], self.ends, args.warmup)


def build_model(hidden: int) -> Any:
    """The MLP every rank and arm starts from (``bench_scaling`` measures the same one)."""
    from benchmarks.harness.models import mlp

    return mlp(256, hidden, hidden, 10)


def make_loader(args: argparse.Namespace, rank: int) -> Any:
    from torch.utils.data import DataLoader, DistributedSampler

    from benchmarks.harness.models import random_data

    data = random_data(args.batch_size * WORLD * (args.warmup + args.steps + 2), 256, classes=10)
    return DataLoader(
        data, batch_size=args.batch_size, sampler=DistributedSampler(data, WORLD, rank, shuffle=True, seed=0)
    )


# DDP's register_comm_hook rejects any annotation of a hook's bucket and result other than the real classes, which this
# module's postponed annotations turn into strings: the hooks go unannotated.
def no_comm_hook(_, bucket):  # type: ignore[no-untyped-def]
    """DDP's bookkeeping without communication: the bucket back as it is (each rank keeps its own gradients)."""
    import torch

    done = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def blocking_hook(_, bucket):  # type: ignore[no-untyped-def]
    """DDP's all-reduce of the bucket, waited for in the hook, so that none of it overlaps backward."""
    import torch
    import torch.distributed as dist

    buffer = bucket.buffer()
    dist.all_reduce(buffer)  # synchronous: returns when the bucket is reduced
    done = torch.futures.Future()
    done.set_result(buffer.div_(dist.get_world_size()))
    return done


def raw_ddp(args: argparse.Namespace, device: Any) -> dict[str, float]:
    """The raw loop's median step, the same steps under ``no_sync()`` (no gradient all-reduce), under the two
    communication hooks and with ``gradient_as_bucket_view=True`` (the module docstring says what each isolates), and
    one all-reduce of the gradients' bytes as a flat buffer: communication efficiency = (step - no-sync step) /
    all-reduce."""
    import contextlib

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    def wrap(hook: Any = None, **ddp_kwargs: Any) -> tuple[Any, Any]:
        model = build_model(args.hidden).to(device)
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None, **ddp_kwargs)
        if hook is not None:
            ddp.register_comm_hook(None, hook)
        return ddp, torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)

    def run(ddp: Any, optimizer: Any, sync: bool = True) -> tuple[float, float]:
        """The median step, and the median of its body (zero_grad, forward, backward, optimizer step)."""
        body = Body(device)

        def step(x: Any, y: Any) -> None:
            body.begin()
            optimizer.zero_grad()
            with contextlib.nullcontext() if sync else ddp.no_sync():
                nn.functional.cross_entropy(ddp(x), y).backward()
            optimizer.step()
            body.end()

        marks = raw_steps(step, make_loader(args, dist.get_rank()), args.warmup + args.steps + 1, device)[0]
        return median_interval(marks, args.warmup, args.steps), body.median(args)

    ddp, optimizer = wrap()
    step, body = run(ddp, optimizer)
    trained = [p.detach().clone() for p in ddp.parameters()]
    no_sync = run(ddp, optimizer, sync=False)[0]
    no_comm_step = run(*wrap(no_comm_hook))[0]
    blocking, bucket_view = wrap(blocking_hook), wrap(gradient_as_bucket_view=True)
    blocking_step, bucket_view_step = run(*blocking)[0], run(*bucket_view)[0]
    # The same work on every arm that all-reduces: both variants must train exactly as plain DDP did.
    for name, (variant, _) in (("blocking hook", blocking), ("gradient_as_bucket_view", bucket_view)):
        if not all(torch.equal(a, b) for a, b in zip(trained, variant.parameters())):
            raise RuntimeError(
                f"bench_ddp: the {name} arm trained differently from plain DDP; its timing would compare other work."
            )
    flat = torch.zeros(sum(p.numel() for p in ddp.parameters()), device=device)
    allreduce = statistics.median(
        [timed(lambda: dist.all_reduce(flat), device) for _ in range(args.warmup + args.steps)][args.warmup :]
    )
    return {
        "raw": step,
        "raw_body": body,
        "raw_no_sync": no_sync,
        "raw_no_comm": no_comm_step,
        "raw_blocking": blocking_step,
        "raw_bucket_view": bucket_view_step,
        "allreduce": allreduce,
    }


def lightning_ddp(args: argparse.Namespace, name: str, save_on_interrupt: bool = False) -> dict[str, float]:
    """Lightning's ``ddp`` run: ``{name: median step, f"{name}_body": median of the same body as the raw loop's}``."""
    import torch

    from benchmarks.harness.models import Trainable
    from benchmarks.harness.trainer import timed_fit
    from lightning_mgpu.callbacks import SaveOnInterrupt

    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if args.accelerator == "gpu" else torch.device("cpu")
    body = Body(device)

    class Module(Trainable):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            body.begin()  # inside optimizer.step(closure): then zero_grad, backward, the step itself
            return super().training_step(batch, batch_idx)

        def optimizer_step(self, *a: Any, **kw: Any) -> None:
            super().optimizer_step(*a, **kw)
            body.end()

    callbacks = (
        [SaveOnInterrupt(dirpath=os.devnull)] if save_on_interrupt else []
    )  # never saves here: nothing signals it
    module = Module(build_model(args.hidden), loader=lambda m: make_loader(args, m.global_rank))
    clock = timed_fit(
        module,
        warmup=args.warmup,
        steps=args.steps,
        device=device,
        callbacks=callbacks,
        strategy="ddp",
        accelerator=args.accelerator,
        devices=WORLD,
        use_distributed_sampler=False,
    )
    return {name: median_interval(clock.marks, args.warmup, args.steps), f"{name}_body": body.median(args)}


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["LOCAL_RANK"])
    if args.accelerator == "cpu":
        torch.set_num_threads(args.threads)
    device = torch.device("cuda", rank) if args.accelerator == "gpu" else torch.device("cpu")

    def slowest(figures: dict[str, float]) -> dict[str, float]:
        """The ranks step in lockstep: each figure is the slower rank's (all of them in one all-reduce)."""
        slowest = torch.tensor(list(figures.values()), dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return dict(zip(figures, slowest.tolist()))

    def raw() -> dict[str, float]:
        if not dist.is_initialized():  # the first Lightning run creates the process group; a raw run before it alike
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=WORLD)
        return slowest(raw_ddp(args, device))

    rounds = interleave(
        {
            "ddp": lambda: slowest(lightning_ddp(args, "ddp")),
            "raw": raw,
            "ddp_save_on_interrupt": lambda: slowest(
                lightning_ddp(args, "ddp_save_on_interrupt", save_on_interrupt=True)
            ),
        },
        args.rounds,
        report=rank == 0,
    )
    # Each arm's figures by name, round by round: "ddp" and "ddp_body" from the ddp arm, and so on.
    finish_rank(args.worker_out, {key: [r[key] for r in runs] for runs in rounds.values() for key in runs[0]})


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker_out is not None:
        worker(args)
        return
    try:
        times = run_ranks(__spec__.name, list(sys.argv[1:] if argv is None else argv), WORLD, what="bench_ddp")[0]
    except ProcessFailure as err:
        raise SystemExit(str(err)) from err
    comm, overhead = communication_figures(times), overhead_figures(times)
    fixed_ms = statistics.median(a - b for a, b in zip(times["ddp"], times["raw"])) * 1e3
    write_result(
        args.result,
        name="ddp",
        arms={k: {"step_s": v} for k, v in times.items()},
        ratios=[
            ratio("ddp (Lightning) / raw torch DDP loop", "ddp", "raw", goal=1.03),
            ratio("ddp + SaveOnInterrupt (train.py's) / ddp", "ddp_save_on_interrupt", "ddp", goal=1.01),
        ],
        figures={
            "ddp - raw DDP, fixed cost per step (ms)": figure(round(fixed_ms, 3)),
            **{label: figure(round(value, 3)) for label, value in overhead.items()},
            EFFICIENCY: figure(round(comm[EFFICIENCY], 3), goal=1.0),
            **{
                label: figure(round(comm[label], 3), higher_is_better=label == HIDDEN)
                for label in (BOOKKEEPING, BUCKETED, HIDDEN, EFFICIENCY_VIEW)
            },
        },
        config=config(args) | {"world_size": WORLD},
    )


if __name__ == "__main__":
    main()
