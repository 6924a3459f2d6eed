"""``dp``: DataParallel on Lightning 2.x.

There is no GPU here, so ``Trainer(strategy="dp")`` runs single-device. The multi-replica code
is tested two ways: its pieces directly (split, replicas, reduction, logging), and end to end
with ``EmulatedDataParallelStrategy``, which runs the real ``LightningDataParallel`` logic with
CPU threads as devices (replicas built like ``torch.nn.parallel.replicate``, one thread per
replica like ``parallel_apply``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies.strategy import _ForwardRedirection
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import lightning_mgpu  # noqa: F401
from lightning_mgpu.checkpoint.io import load_state_dict
from lightning_mgpu.strategies import DataParallelStrategy
from lightning_mgpu.strategies.dp.reduce import (
    BatchSplitError,
    balanced_sizes,
    combine_logged_values,
    plan_split,
    reduce_step_outputs,
    scatter_batch,
)
from lightning_mgpu.strategies.dp.replica import (
    ReplicaDivergenceError,
    StepCall,
    StepModule,
)
from lightning_mgpu.strategies.dp.strategy import SmallBatchError
from lightning_mgpu.testing.dp import (
    EmulatedDataParallel,
    EmulatedDataParallelStrategy,
    emulated_parallel_apply,
    emulated_replicate,
)
from lightning_mgpu.testing.parity import ParityModule, make_data
from tests.helpers.trainer import quiet_trainer

CPU = torch.device("cpu")


# --------------------------------------------------------------------------- helpers
def _trainer(strategy: Any, devices: int = 1, **kwargs: Any) -> pl.Trainer:
    return quiet_trainer(
        strategy=strategy, devices=devices, **{"num_sanity_val_steps": 0, "use_distributed_sampler": False, **kwargs}
    )


def _fit_parity(
    strategy: Any, devices: int, steps: int = 5, global_batch: int = 32, **kwargs: Any
) -> tuple[ParityModule, pl.Trainer]:
    """The harness model and data (tests/integration/runners/run_parity.py), in this process."""
    trainer_kwargs = {
        k: kwargs.pop(k)
        for k in list(kwargs)
        if k in ("accumulate_grad_batches", "gradient_clip_val", "precision", "callbacks")
    }
    model = ParityModule(
        global_batch=global_batch,
        num_samples=global_batch * steps * trainer_kwargs.get("accumulate_grad_batches", 1),
        **kwargs,
    )
    trainer = _trainer(strategy, devices, max_steps=steps, **trainer_kwargs)
    trainer.fit(model)
    return model, trainer


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max((sa[k].float() - sb[k].float()).abs().max().item() for k in sa)


class TinyModule(pl.LightningModule):
    """A linear regressor whose steps record which module object and device ran them."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 2)
        self.seen: list[tuple[int, str, int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen.append((id(self), getattr(self, "marker", "original"), len(x)))
        return F.mse_loss(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _batch(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randn(n, 2, generator=g)


# --------------------------------------------------------------------------- registration and topology
def test_dp_name_resolves_and_runs_single_device_on_cpu(caplog: pytest.LogCaptureFixture) -> None:
    trainer = _trainer("dp", devices=2, max_steps=2)
    assert isinstance(trainer.strategy, DataParallelStrategy)
    # One process; on the CPU one device does the work, so the loader batch must not be doubled.
    assert trainer.world_size == 1
    assert trainer.num_devices == 1
    assert not trainer.strategy.is_data_parallel
    model = ParityModule(global_batch=8, num_samples=16)
    with caplog.at_level("INFO"):
        trainer.fit(model)
    notes = [r.getMessage() for r in caplog.records if "strategy='dp'" in r.getMessage()]
    assert len(notes) == 1 and "single-device" in notes[0] and "\n" not in notes[0], notes
    assert trainer.strategy.model is model  # nothing wrapped (and unwrapped again after fit)


def test_dp_matches_plain_single_device_training_on_cpu() -> None:
    plain, _ = _fit_parity("auto", 1)
    dp, _ = _fit_parity("dp", 1)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), dp.state_dict().values()))


def test_strategy_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="loss_reduction='median'"):
        DataParallelStrategy(loss_reduction="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_nodes=2.*strategy='ddp'"):
        _trainer("dp", devices=1, num_nodes=2)


def test_block_backward_sync_is_a_noop_context() -> None:
    strategy = DataParallelStrategy()
    with strategy.block_backward_sync() as value:
        assert value is None


# --------------------------------------------------------------------------- split
def test_balanced_sizes_use_every_device() -> None:
    assert balanced_sizes(10, 4) == (3, 3, 2, 2)
    assert balanced_sizes(5, 4) == (2, 1, 1, 1)  # torch.chunk would give [2, 2, 1] and idle a GPU
    assert balanced_sizes(3, 4) == (1, 1, 1)  # a last batch smaller than the device count
    with pytest.raises(BatchSplitError, match="empty batch"):
        balanced_sizes(0, 2)


def test_plan_split_rejects_batches_that_cannot_split() -> None:
    with pytest.raises(BatchSplitError, match=r"first dimensions \[3, 5\]"):
        plan_split(((torch.zeros(5, 2), torch.zeros(3)), 0), {}, 2)
    with pytest.raises(BatchSplitError, match="0-dimensional"):
        plan_split(((torch.zeros(4, 2), torch.tensor(1.0)), 0), {}, 2)
    plan = plan_split((["a", "b"], 0), {}, 2)
    assert plan.batch_size is None and plan.num_replicas == 1


@dataclass
class _DataclassBatch:
    x: torch.Tensor
    meta: str


def test_scatter_batch_splits_every_tensor_and_passes_other_values() -> None:
    Pair = namedtuple("Pair", "a b")
    marker = object()
    batch = {
        "x": torch.arange(7.0),
        "pair": Pair(torch.arange(7).view(7, 1), marker),
        "dc": _DataclassBatch(torch.arange(7.0), "m"),
    }
    args, kwargs = (batch, 3), {"flag": torch.arange(7)}
    plan = plan_split(args, kwargs, 3)
    assert plan.sizes == (3, 2, 2)
    chunks = scatter_batch(args, kwargs, plan, [CPU] * 3)
    assert [c[0][0]["x"].tolist() for c in chunks] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [c[1]["flag"].tolist() for c in chunks] == [[0, 1, 2], [3, 4], [5, 6]]
    assert all(isinstance(c[0][0]["pair"], Pair) and c[0][0]["pair"].b is marker for c in chunks)
    assert all(isinstance(c[0][0]["dc"], _DataclassBatch) and c[0][0]["dc"].meta == "m" for c in chunks)
    assert [c[0][0]["dc"].x.tolist() for c in chunks] == [[0, 1, 2], [3, 4], [5, 6]]
    assert all(c[0][1] == 3 for c in chunks)


# --------------------------------------------------------------------------- replicas
def test_each_replica_runs_its_own_lightning_module() -> None:
    """The wrapper's forward runs the step on the replica that DataParallel built, not the original."""
    original = TinyModule()
    wrapper = StepModule(original)
    replicas = emulated_replicate(wrapper, 3)
    for i, replica in enumerate(replicas):
        replica.module.marker = f"replica{i}"  # lands in the replica's own __dict__ copy
    batch = _batch(9)
    plan = plan_split((batch, 0), {}, 3)
    call = StepCall("training_step", original, [CPU] * 3, plan.sizes, "weighted_mean", CPU)
    chunks = scatter_batch((batch, 0), {}, plan, [CPU] * 3)
    outputs = emulated_parallel_apply(
        replicas, [(call, i, *a) for i, (a, _) in enumerate(chunks)], [k for _, k in chunks]
    )

    assert sorted(marker for _, marker, _ in original.seen) == ["replica0", "replica1", "replica2"]
    assert {module_id for module_id, _, _ in original.seen} == {id(r.module) for r in replicas}
    assert id(original) not in {module_id for module_id, _, _ in original.seen}
    assert not hasattr(original, "marker") and "log" not in original.__dict__
    # Replica 0 shares the root's storage (as on the root GPU); the others hold copies.
    assert replicas[0].module.layer.weight.data_ptr() == original.layer.weight.data_ptr()
    assert replicas[1].module.layer.weight.data_ptr() != original.layer.weight.data_ptr()
    loss = reduce_step_outputs(outputs, plan.sizes, CPU)
    loss.backward()
    assert original.layer.weight.grad is not None


def test_forward_redirection_on_replicas_runs_the_original_module() -> None:
    """Why StepModule exists: a naive port (DataParallel around the LightningModule + Lightning's
    ``_ForwardRedirection``) makes every replica run the original module."""
    original = TinyModule()

    class NaiveDataParallel(nn.Module):
        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module

        def forward(self, *args: Any) -> Any:
            # DataParallel replicates inside its forward, i.e. after the redirection patched `forward`.
            replicas = emulated_replicate(self.module, 2)
            for i, replica in enumerate(replicas):
                replica.marker = f"replica{i}"
            return [replica(*args) for replica in replicas]

    _ForwardRedirection()(NaiveDataParallel(original), original, "training_step", _batch(4), 0)
    assert [(module_id, marker) for module_id, marker, _ in original.seen] == [(id(original), "original")] * 2


def test_replica_gets_its_device_autocast_dtype_and_inference_mode() -> None:
    """parallel_apply re-enters autocast with the default dtype and drops inference mode; the replica scope restores
    both."""
    seen: dict[str, Any] = {}

    class Probe(TinyModule):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            seen[self.marker] = (
                torch.is_autocast_enabled("cpu"),
                torch.get_autocast_dtype("cpu"),
                torch.is_inference_mode_enabled(),
                self.device,
            )

    original = Probe()
    replicas = emulated_replicate(StepModule(original), 2, detach=True)
    for i, r in enumerate(replicas):
        r.module.marker = f"r{i}"
    devices = [CPU, torch.device("meta")]  # a distinct device for replica 1, to see `self.device` follow it
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.float16):
        call = StepCall("validation_step", original, devices, [2, 2], "weighted_mean", CPU)
        emulated_parallel_apply(replicas, [(call, 0, _batch(2), 0), (call, 1, _batch(2), 0)], [{}, {}])
        # Without the scope, the thread sees autocast on with CPU's default dtype and no inference mode.
        bare = emulated_parallel_apply([_Probe()], [()], [{}])[0]
    assert seen["r0"] == (True, torch.float16, True, CPU)
    assert seen["r1"] == (True, torch.float16, True, torch.device("meta"))
    assert original.device == CPU
    assert bare == (True, torch.bfloat16, False)


class _Probe(nn.Module):
    def forward(self) -> tuple[bool, torch.dtype, bool]:
        return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_inference_mode_enabled()


# --------------------------------------------------------------------------- reduction
@pytest.mark.parametrize(("n", "devices"), [(10, 4), (7, 3), (5, 4), (3, 4)])
def test_weighted_loss_and_gradients_equal_one_big_batch(n: int, devices: int) -> None:
    """Scatter -> replicas -> weighted reduction gives the single-device loss and gradients, also on uneven splits."""
    batch = _batch(n, seed=n)
    reference = TinyModule()
    full_loss = reference.training_step(batch, 0)
    full_loss.backward()

    def split_run(mode: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        module = TinyModule()
        wrapper = StepModule(module)
        plan = plan_split((batch, 0), {}, devices)
        replicas = emulated_replicate(wrapper, plan.num_replicas)
        call = StepCall("training_step", module, [CPU] * plan.num_replicas, plan.sizes, mode, CPU)  # type: ignore[arg-type]
        chunks = scatter_batch((batch, 0), {}, plan, [CPU] * plan.num_replicas)
        outs = emulated_parallel_apply(
            replicas, [(call, i, *a) for i, (a, _) in enumerate(chunks)], [k for _, k in chunks]
        )
        loss = reduce_step_outputs(outs, plan.sizes, CPU, mode=mode)  # type: ignore[arg-type]
        loss.backward()
        return loss, module.layer.weight.grad, module.layer.bias.grad

    loss, grad_w, grad_b = split_run("weighted_mean")
    torch.testing.assert_close(loss, full_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(grad_w, reference.layer.weight.grad, atol=1e-6, rtol=0)
    torch.testing.assert_close(grad_b, reference.layer.bias.grad, atol=1e-6, rtol=0)
    if len(set(balanced_sizes(n, devices))) > 1:
        # Lightning 1.9's plain mean is biased on uneven splits; the test above would catch it.
        biased, _, _ = split_run("mean")
        assert (biased - full_loss).abs().item() > 1e-4


def test_reduce_step_outputs_gathers_other_values_without_torch_warning() -> None:
    outputs = [
        {
            "loss": torch.tensor(1.0),
            "preds": torch.zeros(3, 2),
            "acc": torch.tensor(0.5),
            "name": "r0",
            "nested": [torch.ones(3)],
        },
        {
            "loss": torch.tensor(4.0),
            "preds": torch.ones(1, 2),
            "acc": torch.tensor(1.0),
            "name": "r1",
            "nested": [torch.zeros(1)],
        },
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = reduce_step_outputs(outputs, [3, 1], CPU)
    assert list(out) == ["loss", "preds", "acc", "name", "nested"]
    assert out["loss"].item() == pytest.approx(1.0 * 0.75 + 4.0 * 0.25)
    assert out["preds"].shape == (4, 2) and out["preds"][3].tolist() == [1.0, 1.0]
    assert out["acc"].tolist() == [0.5, 1.0]  # one entry per replica
    assert out["name"] == "r0"
    assert out["nested"][0].tolist() == [1, 1, 1, 0]
    assert reduce_step_outputs([None, None], [1, 1], CPU) is None
    assert reduce_step_outputs([torch.tensor(2.0), torch.tensor(4.0)], [1, 1], CPU, mode="sum").item() == 6.0
    preds = reduce_step_outputs([torch.zeros(2), torch.ones(1)], [2, 1], CPU, has_loss=False)
    assert preds.tolist() == [0, 0, 1]
    with pytest.raises(RuntimeError, match="returned None on replica"):
        reduce_step_outputs([torch.tensor(1.0), None], [1, 1], CPU)


def test_combine_logged_values() -> None:
    values = [torch.tensor(1.0), torch.tensor(4.0), torch.tensor(2.0)]
    assert combine_logged_values(values, [3, 1, 1], "mean").item() == pytest.approx((3 + 4 + 2) / 5)
    assert combine_logged_values(values, [3, 1, 1], torch.mean).item() == pytest.approx(9 / 5)
    assert combine_logged_values(values, [3, 1, 1], "sum").item() == 7.0
    assert combine_logged_values(values, [3, 1, 1], "max").item() == 4.0
    assert combine_logged_values(values, [3, 1, 1], torch.min).item() == 1.0
    assert combine_logged_values(values, [3, 1, 1], torch.median).item() == 2.0
    assert combine_logged_values([torch.tensor(3)], [1], "mean").item() == 3


# --------------------------------------------------------------------------- end to end on emulated devices
def test_emulated_dp_trains_like_one_device_on_uneven_splits() -> None:
    plain, _ = _fit_parity("auto", 1, global_batch=32)
    dp, trainer = _fit_parity(EmulatedDataParallelStrategy(), 3, global_batch=32)  # 11 + 11 + 10
    assert trainer.num_devices == 3 and trainer.world_size == 1
    assert _max_diff(plain, dp) < 1e-6
    biased, _ = _fit_parity(EmulatedDataParallelStrategy(loss_reduction="mean"), 3, global_batch=32)
    assert _max_diff(plain, biased) > 1e-6


def test_emulated_dp_with_accumulation_and_clipping() -> None:
    kwargs = dict(accumulate_grad_batches=2, gradient_clip_val=0.05, steps=3, global_batch=10)
    plain, _ = _fit_parity("auto", 1, **kwargs)
    dp, _ = _fit_parity(EmulatedDataParallelStrategy(), 4, **kwargs)  # 3 + 3 + 2 + 2
    assert _max_diff(plain, dp) < 1e-6


def test_emulated_dp_manual_optimization_runs_in_lockstep() -> None:
    plain, _ = _fit_parity("auto", 1, manual=True)
    dp, trainer = _fit_parity(EmulatedDataParallelStrategy(), 3, manual=True)
    assert trainer.global_step == 5  # one optimizer step per batch, not one per replica
    assert _max_diff(plain, dp) < 1e-6


class TwoOptimizerModule(pl.LightningModule):
    """A GAN-shaped manual loop: toggles, clipping, a scheduler, and a forward after the first step."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(1)
        self.gen = nn.Linear(4, 4)
        self.disc = nn.Linear(4, 1)
        self.gen_grads: list[torch.Tensor] = []

    @contextlib.contextmanager
    def _toggled(self, optimizer: Any) -> Any:
        """Lightning 2.6's ``toggled_optimizer`` context; before it (2.5), the toggle and untoggle it wraps."""
        if hasattr(self, "toggled_optimizer"):
            with self.toggled_optimizer(optimizer):
                yield
            return
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_g, opt_d = self.optimizers()
        (x,) = batch
        with self._toggled(opt_g):
            g_loss = self.disc(torch.tanh(self.gen(x))).pow(2).mean()  # a per-sample mean, like every exact dp loss
            opt_g.zero_grad()
            self.manual_backward(g_loss)
            self.clip_gradients(opt_g, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
            opt_g.step()
        with opt_d.toggle_model():
            # Uses the generator updated a moment ago: replicas must see the new weights.
            fake = torch.tanh(self.gen(x))
            d_loss = (self.disc(fake) - 1).pow(2).mean() + self.disc(x).pow(2).mean()
        # Backward after untoggling: the generator was frozen during the forward, so it gets no gradient.
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.lr_schedulers().step()
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss})

    def on_train_batch_end(self, *args: Any) -> None:
        self.gen_grads.append(self.gen.weight.grad.clone())

    def configure_optimizers(self) -> Any:
        opt_g = torch.optim.SGD(self.gen.parameters(), lr=0.2, momentum=0.9)
        opt_d = torch.optim.Adam(self.disc.parameters(), lr=0.01)
        return [opt_g, opt_d], [torch.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.5)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(40, 4, generator=torch.Generator().manual_seed(3))), batch_size=10)


def test_emulated_dp_two_optimizers_with_toggles_match_one_device() -> None:
    plain = TwoOptimizerModule()
    _trainer("auto", 1, max_steps=8).fit(plain)
    dp = TwoOptimizerModule()
    trainer = _trainer(EmulatedDataParallelStrategy(), 3, max_steps=8)  # 4 + 3 + 3
    trainer.fit(dp)
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 4  # stepped once per batch
    assert _max_diff(plain, dp) < 1e-5
    assert len(dp.gen_grads) == 4  # max_steps counts both optimizers: 4 batches
    torch.testing.assert_close(torch.stack(dp.gen_grads), torch.stack(plain.gen_grads), atol=1e-5, rtol=0)


class _LoggedValues(Callback):
    def __init__(self) -> None:
        self.train: list[float] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.train.append(trainer.callback_metrics["train_loss"].item())


class LoggingModule(ParityModule):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        err = (self(x) - y).pow(2).mean(dim=1)
        self.log("val_mse", err.mean())
        self.log("val_sum", err.sum(), reduce_fx="sum")
        self.log("val_max", err.max(), reduce_fx="max")
        self.log("val_count", float(len(x)), reduce_fx="sum", batch_size=len(x))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(make_data(50, seed=7), batch_size=16)  # last batch: 2 samples


def test_emulated_dp_logs_one_correct_value_per_step() -> None:
    def run(strategy: Any, devices: int) -> tuple[list[float], dict[str, float], pl.Trainer]:
        model = LoggingModule(global_batch=32, num_samples=96)
        values = _LoggedValues()
        trainer = _trainer(
            strategy, devices, max_steps=3, callbacks=[values], limit_val_batches=1.0, val_check_interval=3
        )
        trainer.fit(model)
        return values.train, {k: v.item() for k, v in trainer.callback_metrics.items()}, trainer

    plain_steps, plain_metrics, _ = run("auto", 1)
    dp_steps, dp_metrics, trainer = run(EmulatedDataParallelStrategy(), 3)
    assert len(dp_steps) == 3
    assert dp_steps == pytest.approx(plain_steps, abs=1e-6)
    assert dp_metrics.keys() == plain_metrics.keys()
    # Epoch means weigh every batch by its size, including the 2-sample last batch split [1, 1].
    for key in ("val_mse", "val_sum", "val_max"):
        assert dp_metrics[key] == pytest.approx(plain_metrics[key], rel=1e-6), key
    assert dp_metrics["val_count"] == 50.0


def test_emulated_dp_predict_returns_predictions_in_order() -> None:
    class Predictor(ParityModule):
        def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self(batch[0])

    loader = DataLoader(make_data(23), batch_size=10)
    plain = _trainer("auto", 1).predict(Predictor(), loader)
    dp = _trainer(EmulatedDataParallelStrategy(), 4).predict(Predictor(), loader)
    assert [p.shape for p in dp] == [p.shape for p in plain]
    torch.testing.assert_close(torch.cat(dp), torch.cat(plain), atol=1e-6, rtol=0)


def test_emulated_dp_bf16_mixed_runs_steps_in_bf16() -> None:
    dtypes: list[torch.dtype] = []

    class Recorder(ParityModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            dtypes.append(self(batch[0]).dtype)
            return super().training_step(batch, batch_idx)

    model = Recorder(global_batch=12, num_samples=36)
    _trainer(EmulatedDataParallelStrategy(), 3, max_steps=3, precision="bf16-mixed").fit(model)
    assert dtypes == [torch.bfloat16] * 9


class BatchNormModule(ParityModule):
    def __init__(self) -> None:
        super().__init__(global_batch=8, num_samples=9)
        self.net = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.Linear(8, 4))


def test_small_last_batch_runs_on_fewer_replicas() -> None:
    model = ParityModule(global_batch=8, num_samples=10)  # batches of 8 and 2 on 4 devices
    trainer = _trainer(EmulatedDataParallelStrategy(), 4, max_epochs=1)
    trainer.fit(model)
    assert trainer.global_step == 2


def test_a_training_batch_smaller_than_the_device_count_is_refused_before_training() -> None:
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    model = ParityModule(global_batch=2, num_samples=8)
    trainer = _trainer(EmulatedDataParallelStrategy(), 4, max_epochs=1)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(
        MisconfigurationException, match=r"across 4 devices, but the training batch size is 2.*at least 4"
    ):
        trainer.fit(model)
    assert trainer.global_step == 0 and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_small_batch_failure_names_the_fix() -> None:
    trainer = _trainer(EmulatedDataParallelStrategy(), 4, max_epochs=1)
    with pytest.raises(SmallBatchError, match=r"batch of 1 samples split over 4 devices.*drop_last=True") as info:
        # 9 samples in batches of 8: the last batch has 1 sample; BatchNorm needs more than one per replica.
        trainer.fit(BatchNormModule())
    assert "Expected more than 1 value per channel" in str(info.value.__cause__)


def test_inconsistent_batch_fails_with_a_clear_error() -> None:
    class BadBatch(ParityModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return super().training_step(batch[:2], batch_idx)

        def train_dataloader(self) -> DataLoader:
            data = make_data(8)
            return DataLoader(
                data, batch_size=4, collate_fn=lambda items: (*torch.utils.data.default_collate(items), torch.ones(3))
            )

    with pytest.raises(BatchSplitError, match="same first dimension"):
        _trainer(EmulatedDataParallelStrategy(), 2, max_steps=1).fit(BadBatch())


@pytest.mark.timeout(60)
def test_diverging_replicas_fail_promptly_instead_of_hanging() -> None:
    class Diverging(ParityModule):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            loss = F.mse_loss(self(x), y)
            opt = self.optimizers()
            if x[0, 0] > -100 and threading.current_thread().name != _first_thread():  # only some replicas step
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()

    _FIRST.clear()
    with pytest.raises(ReplicaDivergenceError, match="same order"):
        _trainer(EmulatedDataParallelStrategy(), 3, max_steps=1).fit(
            Diverging(manual=True, global_batch=6, num_samples=6)
        )


_FIRST: list[str] = []
_LOCK = threading.Lock()


def _first_thread() -> str:
    with _LOCK:
        if not _FIRST:
            _FIRST.append(threading.current_thread().name)
        return _FIRST[0]


@pytest.mark.timeout(60)
def test_failing_replica_stops_the_others_waiting_in_a_collective() -> None:
    class Failing(ParityModule):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            if threading.current_thread().name == _first_thread():
                raise ValueError("boom in one replica")
            self.manual_backward(F.mse_loss(self(x), y))

    _FIRST.clear()
    with pytest.raises(ValueError, match="boom in one replica"):
        _trainer(EmulatedDataParallelStrategy(), 3, max_steps=1).fit(
            Failing(manual=True, global_batch=6, num_samples=6)
        )


def test_logging_a_metric_object_is_refused_with_the_fix() -> None:
    from torchmetrics import MeanMetric

    class MetricLogger(ParityModule):
        def __init__(self) -> None:
            super().__init__(global_batch=4, num_samples=4)
            self.metric = MeanMetric()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.metric.update(loss)
            self.log("m", self.metric)
            return loss

    with pytest.raises(TypeError, match="Log the tensor the metric returns"):
        _trainer(EmulatedDataParallelStrategy(), 2, max_steps=1).fit(MetricLogger())


def test_emulated_engine_as_plain_data_parallel_forward() -> None:
    module = TinyModule()
    engine = EmulatedDataParallel(module, 3)
    x = torch.randn(7, 4)
    torch.testing.assert_close(engine(x), module(x))


# --------------------------------------------------------------------------- checkpoints
def test_dp_checkpoint_has_plain_keys_and_loads_into_a_plain_module(tmp_path: Path) -> None:
    saved: list[Path] = []

    class SaveWhileWrapped(Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            assert isinstance(trainer.strategy.model, EmulatedDataParallel)
            path = tmp_path / f"step{trainer.global_step}.ckpt"
            trainer.save_checkpoint(path)
            saved.append(path)

    model, _ = _fit_parity(EmulatedDataParallelStrategy(), 2, steps=2, callbacks=[SaveWhileWrapped()])
    ckpt = torch.load(saved[-1], map_location="cpu", weights_only=False)
    assert not any(k.startswith("module.") for k in ckpt["state_dict"])
    expected = {k: v for k, v in model.state_dict().items()}

    plain = ParityModule()
    load_state_dict(plain, saved[-1])
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in expected.items())

    bare = ParityModule().net
    bare_state = {k.removeprefix("net."): v for k, v in ckpt["state_dict"].items()}
    bare.load_state_dict(bare_state)  # a plain nn.Module, strict, no prefix juggling
    assert torch.equal(bare[0].weight, model.net[0].weight)


def test_resume_under_dp_continues_like_one_device(tmp_path: Path) -> None:
    first, trainer = _fit_parity("dp", 1, steps=3)
    ckpt = tmp_path / "three.ckpt"
    trainer.save_checkpoint(ckpt)

    def resume(strategy: Any, devices: int) -> ParityModule:
        model = ParityModule(global_batch=32, num_samples=32 * 6)
        _trainer(strategy, devices, max_steps=6).fit(model, ckpt_path=ckpt)
        return model

    plain = resume("auto", 1)
    assert _max_diff(plain, resume("dp", 1)) == 0.0
    assert _max_diff(plain, resume(EmulatedDataParallelStrategy(), 3)) < 1e-6
    assert _max_diff(plain, first) > 1e-3  # it trained further


def test_load_model_state_dict_accepts_module_prefixes() -> None:
    model = ParityModule()
    strategy = DataParallelStrategy()
    strategy.connect(model)
    source = ParityModule(init_seed=5)
    strategy.load_model_state_dict({"state_dict": {f"module.{k}": v for k, v in source.state_dict().items()}})
    assert _max_diff(model, source) == 0.0


def test_emulated_dp_trains_the_example_classifier_with_sync_batchnorm() -> None:
    from lightning_mgpu.demos import DigitsDataModule, ImageClassifier

    model = ImageClassifier()
    before = model.features[1].running_mean.clone()
    trainer = _trainer(
        EmulatedDataParallelStrategy(), 3, max_steps=3, limit_val_batches=2, val_check_interval=3, sync_batchnorm=True
    )
    with pytest.warns(UserWarning, match="sync_batchnorm=True has no effect under strategy='dp'"):
        trainer.fit(model, DigitsDataModule(batch_size=48))
    assert type(model.features[1]) is nn.BatchNorm2d  # not converted: nothing to synchronise over
    assert not torch.equal(before, model.features[1].running_mean)  # the first replica's statistics are kept
    assert {"val_acc", "val_loss", "train_loss"} <= set(trainer.callback_metrics)


def test_emulated_dp_16_mixed_runs_replicas_in_float16() -> None:
    """parallel_apply would run the replicas in autocast's default dtype (bfloat16 on CPU, float16 on CUDA)."""
    dtypes: list[torch.dtype] = []

    class Recorder(ParityModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            dtypes.append(self(batch[0]).dtype)
            return super().training_step(batch, batch_idx)

    from lightning.pytorch.plugins.precision import MixedPrecision

    model = Recorder(global_batch=12, num_samples=36)
    # The Trainer turns precision="16-mixed" into bf16 on CPU; the plugin itself runs fp16 autocast + GradScaler.
    plugin = MixedPrecision("16-mixed", device="cpu")
    trainer = _trainer(EmulatedDataParallelStrategy(), 3, max_steps=3, plugins=[plugin])
    trainer.fit(model)
    assert dtypes == [torch.float16] * 9
    assert trainer.precision_plugin is plugin and plugin.scaler is not None
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_topology_note_maps_gpus_through_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    strategy = DataParallelStrategy(parallel_devices=[torch.device("cuda", 2), torch.device("cuda", 3)])
    assert strategy.is_data_parallel and strategy.root_device == torch.device("cuda", 2)
    note = strategy._topology_note()
    assert "cuda:2, cuda:3 (physical GPUs 6, 7 via CUDA_VISIBLE_DEVICES)" in note and "\n" not in note


def _in_threads(parties: int, body: Any) -> list[Any]:
    """``body(index)`` on ``parties`` threads at once; what each returned or raised."""
    results: list[Any] = [None] * parties

    def run(index: int) -> None:
        try:
            results[index] = body(index)
        except BaseException as err:  # noqa: BLE001 - the test looks at what each replica raised
            results[index] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(parties)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a replica hangs in the rendezvous"
    return results


@pytest.mark.timeout(60)
def test_the_rendezvous_runs_each_call_once_and_fails_every_replica_promptly() -> None:
    from lightning_mgpu.strategies.dp.replica import ReplicaAbortedError, _Rendezvous

    # Every replica gets the one result of an action that saw every replica's value, round after round.
    rendezvous, runs = _Rendezvous(3), []

    def two_rounds(i: int) -> list[Any]:
        return [rendezvous.collective(i, f"step{r}", i * 10 + r, lambda v: runs.append(v) or sum(v)) for r in (1, 2)]

    assert _in_threads(3, two_rounds) == [[33, 36]] * 3 and sorted(runs) == [[1, 11, 21], [2, 12, 22]]

    # Different calls at the same point: every replica raises the one divergence error.
    rendezvous = _Rendezvous(2)
    raised = _in_threads(2, lambda i: rendezvous.collective(i, "optimizer.step()" if i else "zero_grad()", None, len))
    assert all(isinstance(e, ReplicaDivergenceError) and "different methods" in str(e) for e in raised)
    assert raised[0] is raised[1] is rendezvous.root_error

    # The action fails: the replica that ran it raises its error, the other stops, naming it.
    rendezvous = _Rendezvous(2)
    raised = _in_threads(2, lambda i: rendezvous.collective(i, "manual_backward()", None, lambda v: 1 / 0))
    assert sorted(type(e).__name__ for e in raised) == ["ReplicaAbortedError", "ZeroDivisionError"]
    assert isinstance(rendezvous.root_error, ZeroDivisionError)
    assert "ZeroDivisionError" in str(next(e for e in raised if isinstance(e, ReplicaAbortedError)))

    # A replica returns from the step while another waits in a call: the waiting one fails instead of hanging.
    rendezvous = _Rendezvous(2)

    def one_returns_early(i: int) -> Any:
        if i == 0:
            while not rendezvous._calls:  # replica 1 is waiting
                time.sleep(0.001)
            return rendezvous.finish(0)
        return rendezvous.collective(1, "optimizer.step()", None, len)

    raised = _in_threads(2, one_returns_early)
    assert (
        raised[0] is None
        and isinstance(raised[1], ReplicaDivergenceError)
        and "returned from the step" in str(raised[1])
    )
