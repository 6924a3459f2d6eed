"""A deterministic multi-process run that exercises the four bundle callbacks under one strategy.

Run as ``python -m tests.integration.runners.run_callbacks --strategy ddp --devices 2 --mode auto --out DIR``; several
configurations of one strategy in one launch with ``... --out A --then --mode gan ... --out B``.

Every rank writes ``DIR/rank{r}.json`` (what the probe saw) and ``DIR/params_rank{r}.pt``. The probe
counts gradient-reducing collectives per backward pass (``torch.distributed`` reductions, a counting DDP
comm hook, and Horovod's allreduce), the optimizer steps, whether gradients were ``None`` after each step,
the autocast dtype inside ``training_step`` and how often each checkpointed block ran forward.

Modes (``--batches`` micro-batches of ``--global-batch`` samples, the same global batches for every
world size, as in ``tests/integration/runners/run_parity.py``):

- ``auto``: automatic optimization with ``Trainer(accumulate_grad_batches=--accumulate)`` and an
  ``optimizer_zero_grad`` override that zero-fills.
- ``manual``: one optimizer, accumulating by hand: steps when ``(batch_idx + 1) % --accumulate == 0``.
  ``--toggle`` wraps each micro-batch in ``toggle_model(sync_grad=is_last)``; otherwise the callback's
  ``GradSyncToggle(accumulate_grad_batches=...)`` does the skipping.
- ``gan``: two optimizers (generator, discriminator), each micro-batch runs both under
  ``toggle_model(sync_grad=is_last)``.

:func:`reference` recomputes the fp32 result in one process on the global batches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any
from unittest import mock

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import lightning_mgpu  # noqa: F401  (registers the bundle strategies)
from lightning_mgpu.callbacks import (
    ActivationCheckpointing,
    AutoMixedPrecision,
    GradSyncToggle,
    ZeroGradSetToNone,
    mixed_precision,
)
from tests.helpers.runif import RunIf
from tests.helpers.trainer import quiet_trainer

IN, HIDDEN, OUT, DEPTH = 8, 32, 4, 3
LR = 0.1
FORWARD_CALLS: dict[str, int] = defaultdict(int)


def make_data(n: int, seed: int = 7) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    y = x @ torch.randn(IN, OUT, generator=g) + 0.1 * torch.randn(n, OUT, generator=g)
    return TensorDataset(x, y)


class Block(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.fc1, self.fc2 = nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        FORWARD_CALLS[self.name] += 1  # a global: dp replicas are shallow copies
        return x + self.fc2(torch.tanh(self.fc1(x)))


def build_regressor() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {
        "inp": nn.Linear(IN, HIDDEN),
        "out": nn.Linear(HIDDEN, OUT),
        "blocks": nn.Sequential(*[Block(f"b{i}") for i in range(DEPTH)]),
    }


def build_gan() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {
        "gen": nn.Sequential(nn.Linear(OUT, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, IN)),
        "disc": nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1)),
    }


def regress(m: Any, x: torch.Tensor) -> torch.Tensor:
    return m.out(m.blocks(torch.tanh(m.inp(x))))


def gan_losses(m: Any, x: torch.Tensor, z: torch.Tensor, phase: str) -> torch.Tensor:
    if phase == "g":
        return nn.functional.mse_loss(m.disc(m.gen(z)), torch.ones(len(z), 1))
    fake = m.gen(z).detach()
    return nn.functional.mse_loss(m.disc(x), torch.ones(len(x), 1)) + nn.functional.mse_loss(
        m.disc(fake), torch.zeros(len(z), 1)
    )


class ProbeModule(pl.LightningModule):
    def __init__(self, mode: str, accumulate: int, global_batch: int, num_samples: int, toggle: bool) -> None:
        super().__init__()
        self.mode, self.accumulate, self.global_batch, self.num_samples, self.toggle = (
            mode,
            accumulate,
            global_batch,
            num_samples,
            toggle,
        )
        self.automatic_optimization = mode == "auto"
        if mode == "gan":
            for name, module in build_gan().items():
                setattr(self, name, module)
        else:
            modules = build_regressor()
            self.inp, self.out = modules["inp"], modules["out"]  # the blocks are built in configure_model
        self.seen_dtypes: set[str] = set()
        self.grads_after_step: list[bool] = []

    def configure_model(self) -> None:
        if self.mode != "gan" and not hasattr(self, "blocks"):
            self.blocks = build_regressor()["blocks"]  # same seed and order as the reference

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        if self.mode == "auto":
            self.seen_dtypes.add(str(self.inp(x).dtype))
            return nn.functional.mse_loss(regress(self, x).float(), y)
        final = (batch_idx + 1) % self.accumulate == 0
        opts = self.optimizers()
        if self.mode == "manual":
            opt = opts
            with opt.toggle_model(sync_grad=final) if self.toggle else _null():
                self.seen_dtypes.add(str(self.inp(x).dtype))
                self.manual_backward(nn.functional.mse_loss(regress(self, x).float(), y) / self.accumulate)
                if final:
                    opt.step()
                    self._check_grads_none(opt)
                    opt.zero_grad(set_to_none=False)  # zero-fills, if anything were left to fill
            return None
        self.seen_dtypes.add(str(self.gen(y).dtype))
        for opt, phase in zip(opts, ("g", "d")):
            with opt.toggle_model(sync_grad=final):
                self.manual_backward(gan_losses(self, x, y, phase) / self.accumulate)
                if final:
                    opt.step()
                    self._check_grads_none(opt)
                    opt.zero_grad(set_to_none=False)
        return None

    def _check_grads_none(self, opt: Any) -> None:
        self.grads_after_step.append(all(p.grad is None for g in opt.param_groups for p in g["params"]))

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=False)  # the zero-filling override ZeroGradSetToNone must defeat

    def train_dataloader(self) -> DataLoader:
        world, rank = self.trainer.world_size, self.trainer.global_rank
        data = make_data(self.num_samples)
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False) if world > 1 else None
        return DataLoader(data, batch_size=self.global_batch // world, sampler=sampler, shuffle=False)

    def configure_optimizers(self) -> Any:
        if self.mode == "gan":
            return torch.optim.SGD(self.gen.parameters(), lr=LR), torch.optim.SGD(self.disc.parameters(), lr=LR)
        return torch.optim.SGD(self.parameters(), lr=LR)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class Probe(pl.Callback):
    """Counts gradient collectives per backward pass, optimizer steps and gradient state."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.backward_idx = -1
        self.batch_idx = -1
        self.collectives: list[list[int]] = []
        self.steps: list[int] = []
        self.grads_none_at_batch_end: list[bool] = []
        self._stepped = False
        self._in_batch = False
        self._patched: list[tuple[Any, str, Any]] = []

    def _record(self) -> None:
        if self._in_batch:
            self.collectives.append([self.batch_idx, self.backward_idx])

    def _patch(self, owner: Any, name: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        probe = self

        def counted(*args: Any, **kwargs: Any) -> Any:
            probe._record()
            return original(*args, **kwargs)

        setattr(owner, name, counted)
        self._patched.append((owner, name, original))

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for name in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_reduce_coalesced"):
            self._patch(dist, name)
        if "horovod.torch.optimizer" in __import__("sys").modules:
            import horovod.torch.optimizer as hvd_opt

            for name in ("allreduce_async_", "grouped_allreduce_async_"):
                self._patch(hvd_opt, name)
        model = trainer.strategy.model
        if isinstance(model, nn.parallel.DistributedDataParallel):
            # DDP reduces in C++; a Python comm hook makes its all-reduce visible to the patched dist.all_reduce.
            model.register_comm_hook(None, _allreduce_hook)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.batch_idx, self._in_batch, self._stepped = batch_idx, True, False

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self.backward_idx += 1

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self.steps.append(self.batch_idx)
        self._stepped = True

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._in_batch = False
        if self._stepped:
            self.grads_none_at_batch_end.append(all(p.grad is None for p in pl_module.parameters()))

    def _unpatch(self) -> None:
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._unpatch()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._unpatch()
        ac = next((c for c in trainer.callbacks if isinstance(c, ActivationCheckpointing)), None)
        amp = next((c for c in trainer.callbacks if isinstance(c, AutoMixedPrecision)), None)
        zg = next((c for c in trainer.callbacks if isinstance(c, ZeroGradSetToNone)), None)
        rank = trainer.global_rank
        result = {
            "rank": rank,
            "world_size": trainer.world_size,
            "strategy": type(trainer.strategy).__name__,
            "precision": str(trainer.precision),
            "collectives": self.collectives,
            "steps": self.steps,
            "backward_passes": self.backward_idx + 1,
            "grads_none_at_batch_end": self.grads_none_at_batch_end,
            "grads_none_after_step": getattr(pl_module, "grads_after_step", []),
            "dtypes": sorted(getattr(pl_module, "seen_dtypes", [])),
            "checkpointed": list(ac.checkpointed_names) if ac else [],
            "forward_calls": dict(FORWARD_CALLS),
            "logged": sorted(trainer.logged_metrics),
            "amp": _amp_report(trainer, amp),
            "released_bytes": zg.released_bytes_total if zg else None,
            "owned_param_bytes": _owned_param_bytes(trainer),
        }
        self.out.mkdir(parents=True, exist_ok=True)
        torch.save(
            {k: v.detach().cpu().float() for k, v in pl_module.state_dict().items()}, self.out / f"params_rank{rank}.pt"
        )
        (self.out / f"rank{rank}.json").write_text(json.dumps(result))


def _amp_report(trainer: pl.Trainer, amp: AutoMixedPrecision | None) -> dict[str, Any] | None:
    if amp is None:
        return None
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    return {
        "resolved": amp.resolved,
        "optimizer_steps": amp.optimizer_steps,
        "skipped_steps": amp.skipped_steps,
        "plugin": type(trainer.precision_plugin).__name__,
        "scaler": type(scaler).__name__ if scaler is not None else None,
    }


def _owned_param_bytes(trainer: pl.Trainer) -> int | None:
    """Bytes of the parameters whose optimizer shard this rank owns (sharded optimizers only; ``None`` otherwise).

    Read from the optimizers' own partition (FairScale OSS: ``partition_parameters()``, torch ZeRO:
    ``_partition_parameters()``), independently of the gradients the callback released.
    """
    total, sharded = 0, False
    for optimizer in trainer.optimizers:
        partition = getattr(optimizer, "partition_parameters", None) or getattr(
            optimizer, "_partition_parameters", None
        )
        if partition is None:
            continue
        sharded = True
        rank = dist.get_rank() if dist.is_initialized() else 0
        total += sum(p.numel() * p.element_size() for group in partition()[rank] for p in group["params"])
    return total if sharded else None


def _allreduce_hook(state: Any, bucket: Any) -> Any:
    buffer = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])


# DDP checks the annotations as objects, and this module uses `from __future__ import annotations`.
_allreduce_hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


def build_strategy(name: str, mode: str) -> Any:
    """Bundle/Lightning strategy by name; the GAN leaves parameters unused in each phase."""
    if mode != "gan":
        return name
    if name in ("ddp", "ddp_spawn"):
        return f"{name}_find_unused_parameters_true"
    if name in ("sharded", "sharded_spawn"):
        from lightning_mgpu.strategies import ShardedStrategy

        return ShardedStrategy(find_unused_parameters=True, start_method="spawn" if name.endswith("spawn") else "popen")
    return name


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--devices", default=2, type=int)
    p.add_argument("--mode", default="auto", choices=("auto", "manual", "gan"))
    p.add_argument("--accumulate", default=4, type=int)
    p.add_argument("--batches", default=8, type=int, help="micro-batches")
    p.add_argument("--global-batch", default=8, type=int)
    p.add_argument("--precision", default="32-true")
    p.add_argument(
        "--toggle", action="store_true", help="manual mode: use toggle_model(sync_grad=...) instead of the callback"
    )
    p.add_argument("--no-grad-sync", action="store_true", help="leave GradSyncToggle out")
    p.add_argument("--out", required=True, type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    FORWARD_CALLS.clear()
    callbacks: list[pl.Callback] = [ZeroGradSetToNone()]
    if not args.no_grad_sync:
        manual_n = args.accumulate if args.mode == "manual" and not args.toggle else None
        callbacks.append(GradSyncToggle(accumulate_grad_batches=manual_n))
    callbacks.append(ActivationCheckpointing(modules=["gen" if args.mode == "gan" else "blocks.*"]))
    precision = args.precision
    if precision != "32-true":
        amp = AutoMixedPrecision()
        if precision == "bf16-mixed":
            # `--precision auto` on a CPU with native bf16 (this one may lack it): the callback then checks at
            # setup, on every rank and after the strategy swapped in its own plugin, that bf16-mixed really runs.
            with mock.patch.object(mixed_precision, "cpu_has_fast_bf16", lambda: True):
                precision = amp.resolve_precision("cpu")
        callbacks.append(amp)
    callbacks.append(Probe(args.out))
    trainer = quiet_trainer(
        strategy=build_strategy(args.strategy, args.mode),
        devices=args.devices,
        max_epochs=1,
        accumulate_grad_batches=args.accumulate if args.mode == "auto" else 1,
        precision=precision,
        callbacks=callbacks,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
    )
    model = ProbeModule(args.mode, args.accumulate, args.global_batch, args.global_batch * args.batches, args.toggle)
    trainer.fit(model)


def reference(mode: str, accumulate: int, batches: int, global_batch: int) -> dict[str, torch.Tensor]:
    """The fp32 parameters after training on the global batches in one process, synchronizing always."""
    data = make_data(global_batch * batches)
    ns = type("M", (), {})()
    modules = build_gan() if mode == "gan" else build_regressor()
    for name, module in modules.items():
        setattr(ns, name, module)
    params = {n: p for name, m in modules.items() for n, p in m.named_parameters(prefix=name)}
    if mode == "gan":
        groups = [list(ns.gen.parameters()), list(ns.disc.parameters())]
    else:
        groups = [list(params.values())]
    opts = [torch.optim.SGD(g, lr=LR) for g in groups]
    for i in range(batches):
        x, y = (
            data.tensors[0][i * global_batch : (i + 1) * global_batch],
            data.tensors[1][i * global_batch : (i + 1) * global_batch],
        )
        final = (i + 1) % accumulate == 0 or i + 1 == batches
        if mode == "gan":
            for opt, group, phase in zip(opts, groups, ("g", "d")):
                others = [p for g in groups if g is not group for p in g]
                for p in others:
                    p.requires_grad_(False)
                (gan_losses(ns, x, y, phase) / accumulate).backward()
                for p in others:
                    p.requires_grad_(True)
                if final:
                    opt.step()
                    opt.zero_grad()
            continue
        (nn.functional.mse_loss(regress(ns, x), y) / accumulate).backward()
        if final:
            opts[0].step()
            opts[0].zero_grad()
    return {k: v.detach().clone() for k, v in params.items()}


# One launch per configuration, shared by the test modules of the four callbacks within a pytest session.
_LAUNCHES: dict[tuple[Any, ...], Run] = {}


class Run:
    """What every rank of one launch reported, and its parameters."""

    def __init__(self, out: Path, spec: tuple[Any, ...]) -> None:
        self.strategy, self.mode, self.precision, self.devices, self.accumulate = spec
        self.ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
        self.params = [torch.load(p) for p in sorted(out.glob("params_rank*.pt"))]
        assert len(self.ranks) == len(self.params) == max(1, self.ranks[0]["world_size"] if self.ranks else 1), out

    def reference(self) -> dict[str, torch.Tensor]:
        return reference(self.mode, self.accumulate, BATCHES, GLOBAL_BATCH)

    def final_micro_batches(self) -> list[int]:
        return [i for i in range(BATCHES) if (i + 1) % self.accumulate == 0 or i + 1 == BATCHES]


BATCHES, GLOBAL_BATCH = 8, 8

# The launches the four callbacks' test modules share: (strategy, mode, precision). fp32 runs are compared
# exactly with one process that synchronizes every micro-batch; bf16-mixed runs within bf16's precision.
# Each launch costs ~15 s on 2 cores, so cases share launches: GradSyncToggle's manual accumulation runs
# under ddp (fp32: DDPStrategy's exact manual check), ddp_spawn (in bf16-mixed, plus the callback pickled into
# spawned workers) and horovod (its own skip logic), next to the GAN toggle_model runs (ddp's GAN: the bf16 case).
# Lightning's ddp_spawn is the extended tier's (EXTENDED): the bundle's callbacks do under it what they do under ddp,
# and the default tier pickles them into spawned workers under sharded_spawn (tests/integration/reliability).
MATRIX = [
    ("ddp", "auto", "32-true"),
    ("ddp", "manual", "32-true"),
    ("ddp", "gan", "bf16-mixed"),
    ("ddp_spawn", "manual", "bf16-mixed"),
    ("ddp_spawn", "gan", "bf16-mixed"),
    ("sharded", "auto", "32-true"),
    ("sharded", "gan", "bf16-mixed"),
    ("horovod", "auto", "32-true"),
    ("horovod", "manual", "32-true"),
    ("horovod", "gan", "bf16-mixed"),
    ("dp", "auto", "32-true"),
    ("dp", "gan", "bf16-mixed"),
]
EXTENDED = ("ddp_spawn",)


def matrix_params(
    modes: tuple[str, ...] = ("auto", "manual", "gan"), known_bugs: dict[tuple[str, str], str] | None = None
) -> list[Any]:
    """``MATRIX`` as pytest params with the right marks (multi-process: integration; horovod; skips).

    ``known_bugs`` maps ``(strategy, mode)`` to a reason: a strict xfail, which fails once the bug is fixed
    so that the marker gets removed.
    """
    import pytest

    params = []
    for strategy, mode, precision in MATRIX:
        if mode not in modes:
            continue
        marks: list[Any] = []  # the tests that use these live in tests/integration (marked there)
        if strategy.startswith("sharded"):
            marks += RunIf(fairscale=True).marks
        if strategy == "horovod":
            marks += RunIf(horovod=True).marks
        if strategy in EXTENDED:
            marks.append(pytest.mark.extended)
        if (known_bugs or {}).get((strategy, mode)):
            marks.append(pytest.mark.xfail(strict=True, reason=known_bugs[(strategy, mode)]))  # type: ignore[index]
        params.append(pytest.param(strategy, mode, precision, marks=marks, id=f"{strategy}-{mode}"))
    return params


def _spec(strategy: str, mode: str, precision: str, devices: int) -> tuple[Any, ...]:
    return (strategy, mode, precision, devices, 2 if mode == "gan" else 4)


def launch(strategy: str, mode: str, precision: str = "32-true", devices: int = 2, timeout: float = 300) -> Run:
    """Run (once per session) this configuration and return its reports; dp runs in this process.

    The first request for a strategy runs every ``MATRIX`` configuration of that strategy in the same launch, one
    after the other (``--then``): under ddp and sharded the two ranks serve them all, which saves a launch (mostly
    imports) per configuration.
    """
    spec = _spec(strategy, mode, precision, devices)
    if spec not in _LAUNCHES:
        import shutil
        import tempfile

        from tests.helpers.launch import join_runs, run_python

        specs = [spec]
        if strategy != "dp":  # dp runs in this process: no launch to share
            specs += [
                s for s in (_spec(*m, devices) for m in MATRIX if m[0] == strategy) if s != spec and s not in _LAUNCHES
            ]
        outs = [Path(tempfile.mkdtemp(prefix=f"cb_{s[0]}_{s[1]}_")) for s in specs]
        argvs = [
            [
                "--strategy",
                name,
                "--devices",
                str(run_devices),
                "--mode",
                run_mode,
                "--accumulate",
                str(accumulate),
                "--precision",
                run_precision,
                "--batches",
                str(BATCHES),
                "--global-batch",
                str(GLOBAL_BATCH),
                "--out",
                str(out),
            ]
            for (name, run_mode, run_precision, run_devices, accumulate), out in zip(specs, outs)
        ]
        if strategy == "dp":
            main(argvs[0])
        else:
            run_python(
                ["-m", "tests.integration.runners.run_callbacks", *join_runs(argvs)], timeout=timeout * len(specs)
            )
        for s, out in zip(specs, outs):
            _LAUNCHES[s] = Run(out, s)
            shutil.rmtree(out, ignore_errors=True)
    return _LAUNCHES[spec]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    from tests.helpers.launch import split_runs

    for run in split_runs(sys.argv[1:]):
        main(run)
