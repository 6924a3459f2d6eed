"""Multi-fit scenarios for ``strategy='horovod'``, run in real Horovod workers by ``test_horovod.py``.

Not a test module by itself (pytest finds no tests here). Modes::

    horovodrun -np 2 --gloo python -m tests.integration.runners.run_horovod_scenarios workers OUT
    python -m tests.integration.runners.run_horovod_scenarios self-launch OUT --ckpt CKPT  # devices=2, no horovodrun
    python -m tests.integration.runners.run_horovod_scenarios failing-after-fit OUT  # rank 1 dies after fit
    python -m tests.integration.runners.run_horovod_scenarios elsewhere OUT --ckpt CKPT --scaled-ckpt CKPT2  # others
    python -m tests.integration.runners.run_horovod_scenarios failing OUT  # rank 1 raises
    python -m tests.integration.runners.run_horovod_scenarios pickle-after-fit OUT  # torch.save(model) in 2 workers

A launch costs seconds and a 4-step fit does not, so one pair of workers runs every scenario in
:data:`SCENARIOS` in turn. Each fit writes ``OUT/NAME/params_rank{r}.pt`` and ``OUT/NAME/info_rank{r}.json``
(ranks, sizes, sampler settings, allreduce counts, learning rates, checkpoint writers).
:func:`run_scenario` with ``strategy="auto", devices=1`` is the single-process reference on the global batch.
Data and model come from the parity harness (``tests/integration/runners/run_parity.py``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins import TorchCheckpointIO
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset

import lightning_mgpu  # noqa: F401
from lightning_mgpu.callbacks import GradSyncToggle
from lightning_mgpu.checkpoint.io import AtomicCheckpointIO
from lightning_mgpu.strategies import HorovodStrategy
from lightning_mgpu.testing.parity import IN, OUT, ParityModule, make_data
from tests.helpers.trainer import QUIET

GLOBAL_BATCH = 32
NUM_SAMPLES = GLOBAL_BATCH * 8  # enough for 8 steps; every fit sees the same data
STEPS = 4
RESUMED_STEPS = 8
CLIP_NORM = 0.05  # well below the gradient norm of the first steps, so clipping acts
CLIP_VALUE = 0.002


@dataclass(frozen=True)
class Spec:
    """One fit. ``global_batch`` is per micro-batch over all workers; ``accumulate`` micro-batches per step."""

    steps: int = STEPS
    global_batch: int = GLOBAL_BATCH
    accumulate: int = 1
    clip_val: float | None = None
    clip_algo: str = "norm"
    precision: str = "32-true"
    fp16_plugin: bool = False  # 16-mixed with a GradScaler on CPU (the Trainer flag would fall back to bf16 on CPU)
    manual_two_optimizers: bool = False
    manual_grad_sync_toggle: bool = False  # manual accumulation left to the GradSyncToggle callback
    scheduler: bool = False
    scale_lr: bool = False
    uneven: bool = False
    use_distributed_sampler: bool = False


SCENARIOS: dict[str, Spec] = {
    "plain": Spec(),
    "accumulate_clip_norm": Spec(steps=3, accumulate=2, clip_val=CLIP_NORM),
    "clip_value": Spec(steps=3, clip_val=CLIP_VALUE, clip_algo="value", scheduler=True),
    "manual_two_optimizers": Spec(steps=3, accumulate=2, clip_val=CLIP_NORM, manual_two_optimizers=True),
    "manual_grad_sync_toggle": Spec(steps=3, accumulate=2, manual_grad_sync_toggle=True),
    "bf16": Spec(precision="bf16-mixed"),
    "fp16": Spec(fp16_plugin=True),
    "scale_lr": Spec(steps=1, scale_lr=True),
    "lightning_sampler": Spec(steps=1, use_distributed_sampler=True),
    # Last: workers with different numbers of batches (join).
    "uneven": Spec(steps=-1, uneven=True),
}
# Single-process references: the same optimizer steps on the global batch.
REFERENCES: dict[str, Spec] = {
    "plain": SCENARIOS["plain"],
    "plain_unclipped_3": Spec(steps=3),
    "accumulate_clip_norm": Spec(steps=3, global_batch=2 * GLOBAL_BATCH, clip_val=CLIP_NORM),
    "accumulate_unclipped": Spec(steps=3, global_batch=2 * GLOBAL_BATCH),
    "clip_value": SCENARIOS["clip_value"],
    "manual_two_optimizers": SCENARIOS["manual_two_optimizers"],
    "manual_two_optimizers_unclipped": replace(SCENARIOS["manual_two_optimizers"], clip_val=None),
    "manual_grad_sync_toggle": SCENARIOS["manual_grad_sync_toggle"],
    "bf16": SCENARIOS["bf16"],
    "fp16": SCENARIOS["fp16"],
}


class ScenarioModule(ParityModule):
    """The parity MLP with the knobs the scenarios need (plain types only: they land in checkpoints)."""

    def __init__(
        self, global_batch: int = GLOBAL_BATCH, scheduler: bool = False, lightning_sampler: bool = False
    ) -> None:
        super().__init__(lr=0.1, global_batch=global_batch, num_samples=NUM_SAMPLES)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        if not self.hparams.scheduler:
            return optimizer
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def train_dataloader(self) -> DataLoader:
        if not self.hparams.lightning_sampler:
            return super().train_dataloader()
        # Lightning injects its DistributedSampler (shuffling) into this plain loader.
        return DataLoader(make_data(NUM_SAMPLES), batch_size=self.hparams.global_batch // self.trainer.world_size)


class TwoOptimizerModule(pl.LightningModule):
    """Manual optimization with two optimizers over two networks, accumulating micro-batches.

    Non-final micro-batches run inside ``toggle_model(sync_grad=False)``; gradients are clipped by hand
    before each step (Lightning's documented manual-clipping pattern).
    """

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        self.spec = spec
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.net_a = nn.Sequential(nn.Linear(IN, 32), nn.Tanh(), nn.Linear(32, OUT))
        self.net_b = nn.Sequential(nn.Linear(IN, 16), nn.Tanh(), nn.Linear(16, OUT))

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        n = self.spec.accumulate
        final = (batch_idx + 1) % n == 0
        for opt, net in zip(self.optimizers(), (self.net_a, self.net_b)):
            with opt.toggle_model(sync_grad=final):
                loss = nn.functional.mse_loss(net(x), y) / n
                self.manual_backward(loss)
            if final:
                if self.spec.clip_val:
                    self.clip_gradients(opt, gradient_clip_val=self.spec.clip_val, gradient_clip_algorithm="norm")
                opt.step()
                opt.zero_grad()

    def train_dataloader(self) -> DataLoader:
        world, rank = self.trainer.world_size, self.trainer.global_rank
        data = make_data(NUM_SAMPLES)
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False) if world > 1 else None
        return DataLoader(data, batch_size=self.spec.global_batch // world, sampler=sampler)

    def configure_optimizers(self) -> Any:
        return [
            torch.optim.SGD(self.net_a.parameters(), lr=0.1, momentum=0.9),
            torch.optim.SGD(self.net_b.parameters(), lr=0.05),
        ]


class ManualAccumulateModule(ParityModule):
    """Manual optimization that accumulates ``accumulate`` micro-batches without touching sync itself."""

    def __init__(self, accumulate: int = 2) -> None:
        super().__init__(lr=0.1, manual=True, global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        n = self.hparams.accumulate
        self.manual_backward(nn.functional.mse_loss(self(x), y) / n)
        if (batch_idx + 1) % n == 0:
            opt = self.optimizers()
            opt.step()
            opt.zero_grad()


class UnevenModule(ParityModule):
    """Rank r gets 3 + 2r training batches per epoch (no padding); validation is even and sync_dist-logged."""

    def __init__(self) -> None:
        super().__init__(lr=0.05)

    def train_dataloader(self) -> DataLoader:
        rank = self.trainer.global_rank
        data = make_data(NUM_SAMPLES)
        return DataLoader(Subset(data, range(rank * 80, rank * 80 + 8 * (3 + 2 * rank))), batch_size=8)

    def val_dataloader(self) -> DataLoader:
        data = make_data(NUM_SAMPLES)
        return DataLoader(
            Subset(data, range(200 + 16 * self.trainer.global_rank, 216 + 16 * self.trainer.global_rank)), batch_size=8
        )

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y), sync_dist=True)


class AllreduceCounter:
    """Counts the gradient allreduces ``hvd.DistributedOptimizer`` launches, per optimizer (``opt{i}``)."""

    def __init__(self) -> None:
        self.calls: collections.Counter = collections.Counter()

    def install(self) -> None:
        import horovod.torch.optimizer as hvd_optimizer

        for fn_name in ("allreduce_async_", "grouped_allreduce_async_"):
            original = getattr(hvd_optimizer, fn_name)

            def counting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                self.calls[str(kwargs.get("name", "")).split(".")[0]] += 1
                return _original(*args, **kwargs)

            setattr(hvd_optimizer, fn_name, counting)


class SaveRecorder:
    """Records which ranks write checkpoint files."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def install(self) -> None:
        # The bundle's strategies save through AtomicCheckpointIO; Lightning's own through TorchCheckpointIO.
        for cls in (AtomicCheckpointIO, TorchCheckpointIO):
            self._wrap(cls)

    def _wrap(self, cls: type) -> None:
        original = cls.__dict__["save_checkpoint"]
        recorder = self

        def recording(io: Any, checkpoint: Any, path: Any, storage_options: Any = None) -> None:
            if type(io).save_checkpoint is recording:  # count each save once, at the class that does it
                recorder.paths.append(str(path))
            original(io, checkpoint, path, storage_options=storage_options)

        cls.save_checkpoint = recording  # type: ignore[method-assign]


COUNTER = AllreduceCounter()
SAVES = SaveRecorder()


def build_module(spec: Spec) -> pl.LightningModule:
    if spec.manual_two_optimizers:
        return TwoOptimizerModule(spec)
    if spec.manual_grad_sync_toggle:
        return ManualAccumulateModule(spec.accumulate)
    if spec.uneven:
        return UnevenModule()
    return ScenarioModule(spec.global_batch, scheduler=spec.scheduler, lightning_sampler=spec.use_distributed_sampler)


def build_trainer(spec: Spec, strategy: Any, devices: int, **overrides: Any) -> pl.Trainer:
    manual = spec.manual_two_optimizers or spec.manual_grad_sync_toggle
    # The tests' quiet settings, without CleanExit: HorovodStrategy names a failed rank itself.
    kwargs: dict[str, Any] = dict(
        QUIET,
        strategy=strategy,
        devices=devices,
        # In manual optimization every optimizer.step() counts as a global step.
        max_steps=spec.steps * (2 if spec.manual_two_optimizers else 1),
        max_epochs=2 if spec.uneven else None,
        accumulate_grad_batches=1 if manual else spec.accumulate,
        gradient_clip_val=None if manual else spec.clip_val,
        gradient_clip_algorithm=None if manual or not spec.clip_val else spec.clip_algo,
        precision=None if spec.fp16_plugin else spec.precision,
        plugins=[MixedPrecision("16-mixed", "cpu")] if spec.fp16_plugin else None,
        num_sanity_val_steps=0,
        use_distributed_sampler=spec.use_distributed_sampler,
        callbacks=[GradSyncToggle(accumulate_grad_batches=spec.accumulate)] if spec.manual_grad_sync_toggle else None,
    )
    kwargs.update(overrides)
    return pl.Trainer(**kwargs)


def run_scenario(
    name: str,
    spec: Spec,
    out: Path,
    strategy: Any = "horovod",
    devices: int = 2,
    ckpt: str | None = None,
    checkpoint_wrapped: bool = False,
    **overrides: Any,
) -> pl.Trainer:
    """Fit ``spec`` and save this process's parameters and facts under ``out/name``.

    ``checkpoint_wrapped``: the middle layer goes through FairScale's ``checkpoint_wrapper``, as the seed guide
    recommends; the model can then no longer be pickled (the same arithmetic, the same parameter names).
    """
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    if spec.scale_lr and strategy == "horovod":
        strategy = HorovodStrategy(scale_lr=True)
    trainer = build_trainer(spec, strategy, devices, **overrides)
    model = build_module(spec)
    if checkpoint_wrapped:
        from fairscale.nn import checkpoint_wrapper

        model.net[2] = checkpoint_wrapper(model.net[2])
    COUNTER.calls.clear()
    SAVES.paths.clear()
    trainer.fit(model, ckpt_path=ckpt)
    if spec.scale_lr or name == "plain":
        trainer.save_checkpoint(folder / "final.ckpt")
    rank = trainer.global_rank
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, folder / f"params_rank{rank}.pt")
    (folder / f"info_rank{rank}.json").write_text(json.dumps(facts(trainer, model, spec), indent=1, default=str))
    return trainer


def facts(trainer: pl.Trainer, model: pl.LightningModule, spec: Spec) -> dict[str, Any]:
    strategy = trainer.strategy
    optimizers = trainer.optimizers
    loader = trainer.train_dataloader
    sampler = getattr(loader, "sampler", None)
    return {
        "spec": asdict(spec),
        "global_rank": trainer.global_rank,
        "local_rank": trainer.local_rank,
        "node_rank": trainer.node_rank,
        "world_size": trainer.world_size,
        "num_nodes": trainer.num_nodes,
        "num_devices": trainer.num_devices,
        "is_global_zero": trainer.is_global_zero,
        "rank_zero_only_rank": rank_zero_only.rank,
        "sampler_kwargs": getattr(strategy, "distributed_sampler_kwargs", None),
        "loader_sampler": {
            "type": type(sampler).__name__,
            "num_replicas": getattr(sampler, "num_replicas", None),
            "rank": getattr(sampler, "rank", None),
        },
        "global_step": trainer.global_step,
        "optimizer_types": [type(o).__module__ + "." + type(o).__qualname__ for o in optimizers],
        "params_per_optimizer": [
            sum(1 for g in o.param_groups for p in g["params"] if p.requires_grad) for o in optimizers
        ],
        "lrs": [g["lr"] for o in optimizers for g in o.param_groups],
        "allreduce_calls": dict(COUNTER.calls),
        "checkpoint_writes": list(SAVES.paths),
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
    }


def workers(out: Path) -> None:
    """Every scenario in one pair of horovodrun workers, then the checks of ``devices`` against horovodrun."""
    COUNTER.install()
    SAVES.install()
    for name, spec in SCENARIOS.items():
        run_scenario(name, spec, out)
    rank = int(os.environ["HOROVOD_RANK"])
    checks: dict[str, Any] = {}
    # devices=1 is Lightning 1.x's "one device per worker": accepted, one device per local worker.
    legacy = pl.Trainer(strategy="horovod", accelerator="cpu", devices=1, logger=False)
    checks["devices_1"] = {
        "world_size": legacy.world_size,
        "num_devices": legacy.num_devices,
        "root": str(legacy.strategy.root_device),
    }
    try:
        pl.Trainer(strategy="horovod", accelerator="cpu", devices=3, logger=False)
        checks["devices_3"] = "accepted"
    except ValueError as err:
        checks["devices_3"] = str(err)
    checks["collectives"] = collectives(legacy.strategy, rank)
    (out / f"checks_rank{rank}.json").write_text(json.dumps(checks))


def collectives(strategy: Any, rank: int) -> dict[str, Any]:
    """Lightning's collective API on the strategy, with values that differ per rank so a no-op is caught."""
    value = torch.tensor([float(rank + 1)])
    result = {
        "all_gather": strategy.all_gather(torch.tensor([rank, 10 + rank])).tolist(),
        # A strided view (a column of a matrix), as a LightningModule's self.all_gather often gets one.
        "all_gather_strided": strategy.all_gather(torch.tensor([[rank, 0], [10 + rank, 0]]).t()[0]).tolist(),
        "reduce_strided": strategy.reduce(
            torch.tensor([[1.0, 0.0], [float(rank), 0.0]]).t()[0], reduce_op="sum"
        ).tolist(),
        "broadcast_from_1": strategy.broadcast({"from": rank}, src=1),
        "reduce_mean": strategy.reduce(value).item(),
        "reduce_sum": strategy.reduce(value, reduce_op="sum").item(),
        "reduce_max": strategy.reduce(value, reduce_op="max").item(),
        "reduce_int_mean": strategy.reduce(torch.tensor([rank * 3]), reduce_op="mean").item(),
        "decision_all": strategy.reduce_boolean_decision(rank == 0, all=True),
        "decision_any": strategy.reduce_boolean_decision(rank == 0, all=False),
    }
    strategy.barrier()
    return result


def self_launch(out: Path, ckpt: str, single_ckpt: str | None = None) -> None:
    """``Trainer(strategy="horovod", devices=2)`` in a plain process: resume to RESUMED_STEPS.

    From ``ckpt`` (written by 2 workers) and, if given, from ``single_ckpt`` (written by one process).
    The script runs again in the second worker (``HOROVOD_RANK=1``), which takes the same path through it. The first
    run's model holds FairScale's ``checkpoint_wrapper``, which cannot be pickled: only a script launch trains it.
    """
    from lightning_mgpu.strategies.horovod import runtime

    started_here = not runtime.launched_by_horovod()
    spec = replace(SCENARIOS["plain"], steps=RESUMED_STEPS)
    trainer = run_scenario("self_launch", spec, out, ckpt=ckpt, checkpoint_wrapped=True)
    if started_here:
        assert trainer.strategy.launcher is not None and trainer.global_rank == 0, "expected the self-launch's rank 0"
    if single_ckpt is not None:
        run_scenario("self_launch_from_one", spec, out, ckpt=single_ckpt)


def elsewhere(out: Path, ckpt: str, scaled_ckpt: str) -> None:
    """Resume a 2-worker horovod checkpoint under horovod at 1 worker and under other strategies, here."""
    results: dict[str, Any] = {"horovod_imported_at_start": "horovod" in sys.modules}
    spec = replace(SCENARIOS["plain"], steps=RESUMED_STEPS)
    for strategy in ("horovod", "ddp", "dp", "sharded", "auto"):
        run_scenario(f"resume_{strategy}", spec, out, strategy=strategy, devices=1, ckpt=ckpt)
    # Written with scale_lr=True at 2 workers (lr 0.1 -> 0.2), resumed at 1 worker: rescaled to 0.1, not kept.
    run_scenario("scale_lr_resumed", replace(SCENARIOS["scale_lr"], steps=2), out, devices=1, ckpt=scaled_ckpt)
    (out / "elsewhere.json").write_text(json.dumps(results))


class FailingModule(ParityModule):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.trainer.global_rank == 1 and batch_idx == 2:
            raise RuntimeError("rank 1 fails on purpose")
        return super().training_step(batch, batch_idx)


def failing(out: Path) -> None:
    trainer = build_trainer(Spec(steps=6), "horovod", 2)
    trainer.fit(FailingModule(global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES))
    (out / "unexpected_success").write_text("fit returned")


def failing_after_fit(out: Path) -> None:
    """Rank 1 dies after a fit that every worker finished; rank 0 has nothing left to do and exits normally."""
    trainer = build_trainer(Spec(steps=2), "horovod", 2)
    trainer.fit(ParityModule(global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES))
    if trainer.global_rank == 1:
        os._exit(3)
    (out / "rank0_finished").write_text("fit returned")


class KeepsItsOptimizer(ParityModule):
    """Keeps what Lightning hands it: the optimizer (``on_before_optimizer_step``'s argument), as a module that logs its
    hooks' arguments does. Under ``ddp`` such a model pickles."""

    kept: Any = None

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.kept = optimizer


def pickle_after_fit(out: Path) -> None:
    """Self-launch 2 workers, fit, then each worker pickles the trained model (``torch.save`` and ``pickle``) and loads
    it back: ``OUT/pickle_rank{r}.json`` says what came back."""
    import io
    import pickle

    trainer = build_trainer(Spec(steps=2), "horovod", 2)
    module = KeepsItsOptimizer(global_batch=GLOBAL_BATCH, num_samples=NUM_SAMPLES)
    trainer.fit(module)
    results: dict[str, Any] = {
        "kept_is_the_trainers": module.kept is trainer.optimizers[0],
        "still_distributed": hasattr(trainer.optimizers[0], "synchronize"),  # the job's optimizer is left as it is
    }
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    pickled = pickle.loads(pickle.dumps(module))
    for name, copy in (("torch_save", loaded), ("pickle", pickled)):
        params = {id(p) for p in copy.parameters()}
        saved_state = module.kept.state_dict()
        results[name] = {
            "optimizer_class": f"{type(copy.kept).__module__}.{type(copy.kept).__qualname__}",
            "params_are_the_models": all(id(p) in params for g in copy.kept.param_groups for p in g["params"]),
            "state_equal": all(
                torch.equal(copy.kept.state_dict()["state"][i]["momentum_buffer"], slots["momentum_buffer"])
                for i, slots in saved_state["state"].items()
            )
            and len(saved_state["state"]) > 0,
            "lr": copy.kept.param_groups[0]["lr"],
            "weights_equal": all(
                torch.equal(a, b) for a, b in zip(copy.state_dict().values(), module.state_dict().values())
            ),
        }
    (out / f"pickle_rank{trainer.global_rank}.json").write_text(json.dumps(results))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument(
        "mode", choices=("workers", "self-launch", "elsewhere", "failing", "failing-after-fit", "pickle-after-fit")
    )
    p.add_argument("out", type=Path)
    p.add_argument("--ckpt", default=None)
    p.add_argument("--scaled-ckpt", default=None)
    p.add_argument("--single-ckpt", default=None)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.mode == "workers":
        workers(args.out)
    elif args.mode == "self-launch":
        self_launch(args.out, args.ckpt, args.single_ckpt)
    elif args.mode == "elsewhere":
        elsewhere(args.out, args.ckpt, args.scaled_ckpt)
    elif args.mode == "failing":
        failing(args.out)
    elif args.mode == "pickle-after-fit":
        pickle_after_fit(args.out)
    else:
        failing_after_fit(args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
