"""Lightning's Trainer contract under one strategy after another, in one launch.

    python -m tests.integration.runners.run_contract --out DIR ddp sharded sharded_zero sharded_fsdp2

Each strategy runs every feature of ``FEATURES`` (a few small fits each). The runner only observes: every rank writes
what it saw from inside the fit (``DIR/STRATEGY/FEATURE.STAGE.rank{R}.json``: the hook sequence, the logged and
gathered values, the step counts, the checkpoint files), the launching process writes what ``predict`` returned, and a
fit that raised leaves ``DIR/STRATEGY/FEATURE.error.{pid}.json`` with the exception's first line. The tests in
``tests/integration/contract/`` judge those files, and ``tests/helpers/contract.py`` turns them into the feature x
strategy table of ``docs/contract.md``.

Under ``ddp`` and the sharded engines the second rank re-runs this command line, so it walks the same sequence from
its start: a launch holds either script-launched strategies or one-process ones, never both. Under a ``*_spawn``
strategy each fit spawns its workers, which import this module again (hence ``__main__`` below).
"""

from __future__ import annotations

import argparse
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import (
    BatchSizeFinder,
    EarlyStopping,
    GradientAccumulationScheduler,
    LearningRateFinder,
    LearningRateMonitor,
    ModelCheckpoint,
    StochasticWeightAveraging,
)
from lightning.pytorch.loggers import Logger
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.utils.data import DataLoader, TensorDataset

import lightning_mgpu  # noqa: F401  (registers the bundle's strategies)
from tests.helpers.trainer import SaveAtTrainEnd, quiet_trainer

#: The LightningModule and DataHooks hooks whose calls are recorded, as Lightning's own tests/models/test_hooks.py
#: records them: every one is overridden (under every strategy alike), calls itself in, then runs the default.
HOOKS = (
    "prepare_data",
    "setup",
    "configure_model",
    "configure_optimizers",
    "on_fit_start",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_batch_transfer",
    "transfer_batch_to_device",
    "on_after_batch_transfer",
    "training_step",
    "on_before_zero_grad",
    "optimizer_zero_grad",
    "on_before_backward",
    "backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "configure_gradient_clipping",
    "optimizer_step",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "validation_step",
    "on_validation_batch_end",
    "on_validation_epoch_end",
    "on_validation_end",
    "on_validation_model_eval",
    "on_validation_model_train",
    "on_test_start",
    "on_test_epoch_start",
    "on_test_batch_start",
    "test_step",
    "on_test_batch_end",
    "on_test_epoch_end",
    "on_test_end",
    "on_test_model_eval",
    "on_predict_start",
    "on_predict_epoch_start",
    "on_predict_batch_start",
    "predict_step",
    "on_predict_batch_end",
    "on_predict_epoch_end",
    "on_predict_end",
    "on_predict_model_eval",
    "on_train_end",
    "on_fit_end",
    "on_save_checkpoint",
    "on_load_checkpoint",
    "teardown",
    "train_dataloader",
    "val_dataloader",
    "test_dataloader",
    "predict_dataloader",
)
SAMPLES = 16
BATCH = 2
LR = 0.01


class EveryOtherBackwards(torch.utils.data.Sampler[int]):
    """A user's sampler: the even indices, last first."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return iter(range(self.n - 2, -1, -2))

    def __len__(self) -> int:
        return self.n // 2


class RecordingLogger(Logger):
    """Keeps what the Trainer's callbacks log, where the rank that logged can write it out."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.records.append({"step": step, **{k: float(v) for k, v in metrics.items()}})

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def _data(seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(SAMPLES, 4, generator=g), torch.randn(SAMPLES, 2, generator=g))


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: FSDP2 holds DTensor shards (``full_tensor`` is a collective: every rank calls it)."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().float().cpu().clone()


class ContractModule(pl.LightningModule):
    """A two-layer regression model with the switches the features need.

    Args:
        feature: what this fit observes (``FEATURES``); the module's hooks write to ``out``.
        out: the strategy's folder.
    """

    def __init__(self, feature: str, out: str) -> None:
        super().__init__()
        self.feature, self.out = feature, out
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        self.automatic_optimization = feature != "manual"
        self.seen: dict[str, Any] = {"batches": 0}
        self.stage_label: str | None = None  # names the files of a stage other than Lightning's own (a resume)
        # What the tuner's callbacks look up and change (LearningRateFinder: ``lr``; BatchSizeFinder: ``batch_size``).
        self.lr, self.batch_size = LR, BATCH

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y = batch[0], batch[1]
        if self.feature == "sampler" and self.training:
            self.seen.setdefault("indices", []).extend(int(i) for i in batch[2])
        out = self(x)
        self.seen.setdefault("output_dtype", str(out.dtype))
        return nn.functional.mse_loss(out.float(), y) * 100  # large gradients: the clipping must bite

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen["batches"] += 1  # here, not in training_step: DataParallel runs that once per device
        self.seen.setdefault("batch_sizes", []).append(len(batch[0]))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self._loss(batch)
        if self.feature == "log":
            rank = float(self.global_rank)
            self.log("synced", rank + 1, sync_dist=True, on_step=False, on_epoch=True, reduce_fx="mean")
            self.log("summed", rank + 1, sync_dist=True, on_step=False, on_epoch=True, reduce_fx="sum")
            self.log("rank_zero_only", rank, rank_zero_only=True, on_step=False, on_epoch=True)
        if self.feature == "checkpoint":
            self.log("score", 1.0 / (self.global_step + 1), on_step=True, on_epoch=False)  # falls: later is better
        if self.feature == "manual":
            optimizers = self.optimizers()
            for opt in optimizers if isinstance(optimizers, list) else [optimizers]:
                opt.zero_grad()
                self.manual_backward(self._loss(batch))
                opt.step()
            return None
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._loss(batch)
        # Rises with the epoch: EarlyStopping(mode="min") must stop once patience runs out, on every rank together.
        self.log("rising", float(self.current_epoch), sync_dist=True)
        if self.feature == "eval_log":  # per loader: Lightning suffixes /dataloader_idx_N
            self.log("val_synced", float(self.global_rank + 1 + 10 * dataloader_idx), sync_dist=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._loss(batch)
        if self.feature == "eval_log":
            self.log("test_synced", float(self.global_rank + 1), sync_dist=True)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0]).float()

    def configure_optimizers(self) -> Any:
        if self.feature == "lr_monitor":
            opt = torch.optim.SGD(self.parameters(), lr=0.01)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}
        if self.feature == "manual":
            return [
                torch.optim.SGD(self.net[0].parameters(), lr=0.01),
                torch.optim.SGD(self.net[2].parameters(), lr=0.01),
            ]
        return torch.optim.SGD(self.parameters(), lr=1.0 if self.feature.startswith("clip") else self.lr)

    def train_dataloader(self) -> DataLoader:
        if self.feature == "sampler":
            # The user's own sampler (every other sample, backwards): Lightning wraps it so that the ranks share it.
            data = TensorDataset(*_data(0).tensors, torch.arange(SAMPLES))
            return DataLoader(data, batch_size=BATCH, sampler=EveryOtherBackwards(SAMPLES))
        return DataLoader(_data(0), batch_size=self.batch_size)

    def val_dataloader(self) -> Any:
        if self.feature == "eval_log":
            return [DataLoader(_data(1), batch_size=BATCH), DataLoader(_data(5), batch_size=BATCH)]
        return DataLoader(_data(1), batch_size=BATCH)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(_data(2), batch_size=BATCH)

    def predict_dataloader(self) -> list[DataLoader]:
        return [DataLoader(_data(3), batch_size=BATCH), DataLoader(_data(4), batch_size=BATCH)]

    def setup(self, stage: str) -> None:
        if self.feature == "lr_finder":  # before the strategy wraps or shards the model, and before the search
            self._initial = {k: v.detach().clone() for k, v in self.state_dict().items()}

    def on_train_start(self) -> None:
        self.seen["param_dtype"] = str(next(self.parameters()).dtype)
        if self.feature == "lr_finder":
            # The search's steps are undone (Lightning restores the checkpoint it saved first); its suggestion is the
            # module's lr and the optimizer's.
            now = {k: _full(v) for k, v in self.state_dict().items()}
            self.seen.update(
                lr=self.lr,
                optimizer_lr=self.trainer.optimizers[0].param_groups[0]["lr"],
                restored=all(torch.equal(now[k], self._initial[k].float()) for k in self._initial),
            )
        if self.feature == "batch_size_finder":
            self.seen["batch_size"] = self.batch_size
        if self.feature in ("lr_finder", "batch_size_finder"):  # the checkpoint each saved before it searched
            root = Path(self.trainer.default_root_dir)
            self.seen["left_behind"] = sorted(
                p.name for p in root.iterdir() if p.name.startswith((".lr_find", ".scale"))
            )
        if self.feature.startswith("clip"):
            self._before = {k: _full(v) for k, v in self.state_dict().items()}

    def on_train_end(self) -> None:
        trainer = self.trainer
        self.seen.update(global_step=trainer.global_step, current_epoch=trainer.current_epoch, world=trainer.world_size)
        if self.feature.startswith("clip"):
            delta = torch.cat([(_full(v) - self._before[k]).flatten() for k, v in self.state_dict().items()])
            self.seen.update(update_norm=float(delta.norm()), update_max=float(delta.abs().max()))
        if self.feature == "log":
            self.seen["metrics"] = {k: float(v) for k, v in trainer.callback_metrics.items()}
            rank = self.global_rank
            column = (torch.arange(6.0).view(2, 3) + rank)[:, 1]  # a strided view: not contiguous
            assert not column.is_contiguous()
            gathered: Any = self.all_gather(
                {"a": torch.tensor([float(rank)]), "b": [column], "c": torch.tensor(rank + 1.0)}
            )
            self.seen["gathered"] = {
                "a": gathered["a"].tolist(),
                "b": gathered["b"][0].tolist(),
                "c": gathered["c"].tolist(),
            }

    def teardown(self, stage: str) -> None:
        """Write what this rank saw in the stage (the module's ``teardown`` is the stage's last hook)."""
        seen = dict(self.seen)
        calls = getattr(self, "calls", None)
        if calls is not None:
            seen["calls"] = list(calls)
            calls.clear()
        seen["world"] = self.trainer.world_size
        if self.feature == "eval_log":
            seen["metrics"] = {k: float(v) for k, v in self.trainer.callback_metrics.items()}
        if self.feature == "lr_monitor" and isinstance(self.trainer.logger, RecordingLogger):
            seen["logged"] = [r for r in self.trainer.logger.records if any(k.startswith("lr-") for k in r)]
        if self.feature == "checkpoint":
            folder = Path(self.out) / "checkpoint"
            seen["files"] = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        label = self.stage_label or str(getattr(stage, "value", stage))
        (Path(self.out) / f"{self.feature}.{label}.rank{self.global_rank}.json").write_text(json.dumps(seen))
        self.seen = {"batches": 0}


def _recording(name: str) -> Callable[..., Any]:
    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(name)
        return getattr(super(HookedModule, self), name)(*args, **kwargs)

    hook.__name__ = name
    return hook


class HookedModule(ContractModule):
    """:class:`ContractModule` that records each hook of ``HOOKS`` as it is called."""

    def __init__(self, feature: str, out: str) -> None:
        super().__init__(feature, out)
        self.calls: list[str] = []


for _name in HOOKS:
    setattr(HookedModule, _name, _recording(_name))


def _trainer(name: str, out: Path, feature: str, **kwargs: Any) -> pl.Trainer:
    strategy, devices = _strategy(name)  # a new instance per Trainer: a strategy object keeps its accelerator
    callbacks = kwargs.pop("callbacks", [])
    if kwargs.pop("logger", None):
        kwargs["logger"] = RecordingLogger()
    base = {
        "max_steps": 2,
        "limit_val_batches": 2,
        "limit_test_batches": 2,
        "limit_predict_batches": 2,
        "num_sanity_val_steps": 0,
        "default_root_dir": str(out),
    }
    return quiet_trainer(strategy=strategy, devices=devices, callbacks=callbacks, **{**base, **kwargs})


def _hooks(name: str, out: Path) -> None:
    model = HookedModule("hooks", str(out))
    ckpt = out / "hooks.ckpt"
    trainer = _trainer(name, out, "hooks", callbacks=[SaveAtTrainEnd(str(ckpt))], val_check_interval=2)
    trainer.fit(model)
    for stage in ("validate", "test", "predict"):
        getattr(_trainer(name, out, "hooks"), stage)(model)
    # A resume with max_steps: the hooks around the restore.
    model = HookedModule("hooks", str(out))
    model.stage_label = "resume"
    _trainer(name, out, "hooks", max_steps=3, val_check_interval=2).fit(model, ckpt_path=str(ckpt))


def _fit(feature: str, callbacks: Callable[[], list[pl.Callback]] = list, **kwargs: Any) -> Callable[[str, Path], None]:
    """A feature that is one fit; ``callbacks`` makes new ones for each strategy (a callback keeps its state: an
    EarlyStopping reused from the previous strategy's fit stopped at once)."""

    def run(name: str, out: Path) -> None:
        _trainer(name, out, feature, callbacks=callbacks(), **kwargs).fit(ContractModule(feature, str(out)))

    return run


def _ema_update(averaged: torch.Tensor, current: torch.Tensor, num_averaged: torch.Tensor) -> torch.Tensor:
    """An exponential moving average with decay 0.9, at module level: a spawn launcher pickles the callback
    (torch's ``get_ema_multi_avg_fn`` is a closure, which does not pickle)."""
    return averaged + (current - averaged) * 0.1


def _ema() -> pl.Callback:
    """Lightning 2.6's EMA: ``WeightAveraging`` with an exponential moving average."""
    from lightning.pytorch.callbacks import WeightAveraging

    return WeightAveraging(avg_fn=_ema_update)


def _init_module(name: str, out: Path) -> None:
    trainer = _trainer(name, out, "init_module")
    with trainer.init_module():
        model = ContractModule("init_module", str(out))
    trainer.fit(model)


def _compile(name: str, out: Path) -> None:
    """A compiled LightningModule (``backend="eager"``: Dynamo's capture without Inductor's C++ build)."""
    model = torch.compile(ContractModule("compile", str(out)), backend="eager")
    _trainer(name, out, "compile").fit(model)  # type: ignore[arg-type]  # Lightning unwraps the OptimizedModule


def _eval_log(name: str, out: Path) -> None:
    model = ContractModule("eval_log", str(out))
    _trainer(name, out, "eval_log").validate(model)
    _trainer(name, out, "eval_log").test(model)
    _trainer(name, out, "eval_log", val_check_interval=2).fit(model)  # fit's validation, on the same two loaders


def _predict(name: str, out: Path) -> None:
    model = ContractModule("predict", str(out))
    predictions = _trainer(name, out, "predict").predict(model, return_predictions=True)
    # What the launching process got back (under *_spawn: rank 0's, from its worker).
    returned: dict[str, Any] = {"type": type(predictions).__name__}
    if isinstance(predictions, list):
        returned["batches"] = [len(p) if isinstance(p, list) else -1 for p in predictions]
    (out / f"predict.returned.{os.getpid()}.json").write_text(json.dumps(returned))


def _lr_finder(name: str, out: Path) -> None:
    """LearningRateFinder as Lightning's tests/tuner/test_lr_finder.py uses it: a search of 20 steps at fit start."""
    torch.manual_seed(0)  # the same model on every rank: its weights must come back as they were
    finder = LearningRateFinder(min_lr=1e-4, max_lr=1.0, num_training_steps=20, early_stop_threshold=None)
    _trainer(name, out, "lr_finder", callbacks=[finder]).fit(ContractModule("lr_finder", str(out)))


def _batch_size_finder(name: str, out: Path) -> None:
    """BatchSizeFinder doubling from 2 for 3 trials of one step (Lightning refuses it under distributed strategies)."""
    finder = BatchSizeFinder(mode="power", init_val=BATCH, max_trials=3, steps_per_trial=1)
    _trainer(name, out, "batch_size_finder", callbacks=[finder]).fit(ContractModule("batch_size_finder", str(out)))


def _checkpoint(name: str, out: Path) -> None:
    every = ModelCheckpoint(
        dirpath=out / "checkpoint", monitor="score", mode="min", save_top_k=2, save_last=True, every_n_train_steps=1
    )
    _trainer(name, out, "checkpoint", max_steps=4, enable_checkpointing=True, callbacks=[every]).fit(
        ContractModule("checkpoint", str(out))
    )


FEATURES: dict[str, Callable[[str, Path], None]] = {
    "hooks": _hooks,
    "log": _fit("log", max_steps=4),
    "clip_norm": _fit("clip_norm", max_steps=1, gradient_clip_val=1e-3, gradient_clip_algorithm="norm"),
    "clip_value": _fit("clip_value", max_steps=1, gradient_clip_val=1e-4, gradient_clip_algorithm="value"),
    "accumulate": _fit("accumulate", max_steps=3, accumulate_grad_batches=2),
    "manual": _fit("manual", max_steps=-1, max_epochs=1, limit_train_batches=2),
    "predict": _predict,
    "eval_log": _eval_log,
    "checkpoint": _checkpoint,
    "early_stopping": _fit(
        "early_stopping",
        max_steps=-1,
        max_epochs=6,
        limit_train_batches=1,
        callbacks=lambda: [EarlyStopping(monitor="rising", mode="min", patience=1)],
    ),
    "swa": _fit(
        "swa",
        max_steps=-1,
        max_epochs=2,
        limit_train_batches=2,
        callbacks=lambda: [StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1)],
    ),
    "ema": _fit("ema", max_steps=-1, max_epochs=2, limit_train_batches=2, callbacks=lambda: [_ema()]),
    "precision_64": _fit("precision_64", precision="64-true"),
    "precision_bf16": _fit("precision_bf16", precision="bf16-mixed"),
    "precision_bf16_true": _fit("precision_bf16_true", precision="bf16-true"),
    "precision_16": _fit("precision_16", precision="16-mixed"),
    "accumulate_scheduled": _fit(
        "accumulate_scheduled",
        max_steps=-1,
        max_epochs=2,
        limit_train_batches=4,
        callbacks=lambda: [GradientAccumulationScheduler(scheduling={0: 1, 1: 2})],
    ),
    "lr_monitor": _fit(
        "lr_monitor",
        max_steps=3,
        logger=True,
        log_every_n_steps=1,
        callbacks=lambda: [LearningRateMonitor(logging_interval="step")],
    ),
    "sampler": _fit("sampler", max_steps=-1, max_epochs=1),
    "lr_finder": _lr_finder,
    "batch_size_finder": _batch_size_finder,
    "init_module": _init_module,
    "compile": _compile,
}


def _strategy(name: str) -> tuple[Any, int]:
    """The Trainer's ``strategy`` and ``devices`` for a contract name: a registered name on 2 devices, or the
    emulated multi-device ``dp`` (CPU threads as its devices)."""
    if name == "dp_emulated":
        from lightning_mgpu.testing.dp import EmulatedDataParallelStrategy

        return EmulatedDataParallelStrategy(), 2
    if name in ("dp", "ddp2"):  # one process; on CPU a single device
        return name, 1
    return name, 2


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--features", default=",".join(FEATURES))
    p.add_argument("strategies", nargs="+")
    args = p.parse_args(argv)
    for name in args.strategies:
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        for feature in args.features.split(","):
            try:
                FEATURES[feature](name, out)
            # Recorded for the tests to judge; the next feature runs. (torch.distributed.checkpoint's
            # CheckpointException is a BaseException.)
            except (Exception, CheckpointException) as err:
                first = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                record = {"error": first, "traceback": traceback.format_exc()[-3000:]}
                (out / f"{feature}.error.{os.getpid()}.json").write_text(json.dumps(record))
            torch.manual_seed(0)


if __name__ == "__main__":  # spawn re-imports this module in the workers
    main()
