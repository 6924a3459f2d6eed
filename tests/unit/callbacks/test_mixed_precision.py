"""AutoMixedPrecision: resolving ``precision="auto"``, conflicts, loss-scale monitoring, the shard-aware check.

Lightning turns ``Trainer(accelerator="cpu", precision="16-mixed")`` into ``bf16-mixed``, but a hand-built
``MixedPrecision("16-mixed", "cpu")`` plugin runs real float16 autocast with ``torch.amp.GradScaler("cpu")``,
so loss scaling and skipped steps are tested through Lightning on CPU.

The in-process tests; the ones that launch processes are in ``tests/integration/callbacks/test_mixed_precision.py``.
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import AutoMixedPrecision
from lightning_mgpu.callbacks import mixed_precision as amp_module
from lightning_mgpu.callbacks.mixed_precision import cpu_has_fast_bf16
from lightning_mgpu.plugins import ShardAwareGradScaler
from tests.helpers.runif import RunIf
from tests.helpers.trainer import quiet_trainer


@pytest.fixture
def hardware(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pretend hardware: ``hardware(cuda=..., cuda_bf16=..., cpu_bf16=...)``."""

    def set_(cuda: bool = False, cuda_bf16: bool = False, cpu_bf16: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
        monkeypatch.setattr(amp_module, "cpu_has_fast_bf16", lambda: cpu_bf16)
        monkeypatch.setattr(amp_module, "_mps_available", lambda: False)

    return set_


@pytest.mark.parametrize(
    ("accelerator", "cuda", "cuda_bf16", "cpu_bf16", "expected"),
    [
        ("auto", True, True, False, "bf16-mixed"),  # Ampere+
        ("auto", True, False, True, "16-mixed"),  # Volta/Turing: fp16 + loss scaling
        ("gpu", True, False, False, "16-mixed"),
        ("auto", False, False, True, "bf16-mixed"),  # CPU with AVX512-BF16 / AMX
        ("cpu", True, True, True, "bf16-mixed"),
        ("auto", False, False, False, "32-true"),  # CPU without fast bf16
        ("cpu", True, True, False, "32-true"),
    ],
)
def test_resolve_precision(
    hardware: Any, accelerator: str, cuda: bool, cuda_bf16: bool, cpu_bf16: bool, expected: str
) -> None:
    hardware(cuda=cuda, cuda_bf16=cuda_bf16, cpu_bf16=cpu_bf16)
    amp = AutoMixedPrecision()
    assert amp.resolve_precision(accelerator) == expected
    assert amp.resolved == expected


def test_resolve_precision_errors(hardware: Any) -> None:
    hardware(cuda=False)
    with pytest.raises(MisconfigurationException, match="no CUDA device is visible"):
        AutoMixedPrecision().resolve_precision("gpu")
    with pytest.raises(ValueError, match="accelerator must be one of"):
        AutoMixedPrecision().resolve_precision("tpu")
    with pytest.raises(ValueError, match="max_consecutive_skips"):
        AutoMixedPrecision(max_consecutive_skips=0)


def test_cpu_bf16_detection_reads_cpu_flags(tmp_path: Path) -> None:
    if os.uname().sysname != "Linux":
        pytest.skip("reads /proc/cpuinfo-style flags on Linux")
    amx, avx2, arm = tmp_path / "amx", tmp_path / "avx2", tmp_path / "arm"
    amx.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    avx2.write_text("processor : 0\nflags : fpu sse avx2 avx512f\n")
    arm.write_text("processor : 0\nFeatures : fp asimd bf16 i8mm\n")
    assert cpu_has_fast_bf16(str(amx)) and cpu_has_fast_bf16(str(arm))
    assert not cpu_has_fast_bf16(str(avx2))
    assert not cpu_has_fast_bf16(str(tmp_path / "missing"))


class _Model(pl.LightningModule):
    def __init__(self, overflow_at: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.overflow_at = overflow_at
        self.dtypes: set[torch.dtype] = set()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        out = self.net(batch[0])
        self.dtypes.add(out.dtype)
        loss = out.float().pow(2).mean()
        # An inf loss makes every gradient inf: the GradScaler must skip this optimizer step.
        return loss * float("inf") if batch_idx in self.overflow_at else loss

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=2)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(callbacks: list[pl.Callback], **kwargs: Any) -> pl.Trainer:
    return quiet_trainer(max_epochs=1, callbacks=callbacks, **kwargs)


def test_conflicting_explicit_precision_is_an_error(hardware: Any) -> None:
    hardware(cpu_bf16=True)
    amp = AutoMixedPrecision()
    assert amp.resolve_precision("cpu") == "bf16-mixed"
    with pytest.raises(MisconfigurationException, match=r"resolved precision='bf16-mixed'.*runs precision='32-true'"):
        _trainer([amp], precision="32-true").fit(_Model())
    # An explicit precision plugin that disagrees is caught the same way.
    with pytest.raises(MisconfigurationException, match=r"runs precision='16-mixed' \(MixedPrecision\)"):
        _trainer([amp], plugins=[MixedPrecision("16-mixed", "cpu")]).fit(_Model())


def test_unresolved_callback_needs_a_mixed_precision_trainer() -> None:
    with pytest.raises(MisconfigurationException, match="no precision was resolved"):
        _trainer([AutoMixedPrecision()], precision="32-true").fit(_Model())


def test_resolved_precision_trains_with_autocast(hardware: Any) -> None:
    hardware(cpu_bf16=True)
    amp = AutoMixedPrecision()
    model = _Model()
    trainer = _trainer([amp], precision=amp.resolve_precision("cpu"))
    trainer.fit(model)
    assert str(trainer.precision) == "bf16-mixed" and model.dtypes == {torch.bfloat16}
    assert amp.skipped_steps == 0 and "amp/loss_scale" not in trainer.logged_metrics  # bf16: no loss scaling


class _StepEffect(pl.Callback):
    """Ground truth: which optimizer steps really left the parameters unchanged."""

    def __init__(self) -> None:
        self.before: list[torch.Tensor] | None = None
        self.unchanged: list[int] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self.before = [p.detach().clone() for p in pl_module.parameters()]

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if all(torch.equal(b, p) for b, p in zip(self.before, pl_module.parameters())):
            self.unchanged.append(args[-1])


def test_forced_overflow_is_counted_as_a_skipped_step() -> None:
    torch.manual_seed(0)
    amp, effect = AutoMixedPrecision(), _StepEffect()
    model = _Model(overflow_at=(2, 5))
    # A moderate initial scale: no overflow but the forced ones (65536 can overflow fp16 on the first steps).
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**8))
    trainer = _trainer([amp, effect], plugins=[plugin])
    trainer.fit(model)
    assert model.dtypes == {torch.float16}
    assert effect.unchanged == [2, 5]  # the real GradScaler skipped exactly the forced overflows
    assert (amp.skipped_steps, amp.optimizer_steps) == (2, 8)
    assert plugin.scaler.get_scale() == 2.0**6  # it backed off twice
    logged = trainer.logged_metrics
    assert logged["amp/skipped_steps"] == 2.0
    assert logged["amp/loss_scale"] == 2.0**6  # the scale used for the last step


def test_logs_only_on_the_steps_lightning_hands_to_the_loggers() -> None:
    """Each ``self.log`` costs about a millisecond of Python in Lightning 2.6 (4-5 % of a 24 ms H200 step): the
    callback counts every step but logs only where a logger would record the value, and on the last step."""
    calls: list[tuple[int, str]] = []

    class Counting(_Model):
        def log(self, name: str, *args: Any, **kwargs: Any) -> None:
            if name.startswith("amp/"):
                calls.append((self.trainer.global_step, name))
            super().log(name, *args, **kwargs)

    amp = AutoMixedPrecision()
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**8))
    trainer = _trainer([amp], plugins=[plugin], log_every_n_steps=3)
    trainer.fit(Counting(overflow_at=(4,)))  # 8 optimizer steps, one of them skipped
    assert amp.optimizer_steps == 8 and amp.skipped_steps == 1  # every step is still counted
    # Lightning's logging steps are global steps 2 and 5 ((step + 1) % 3 == 0); step 7 is the last of the epoch.
    assert sorted({step for step, _ in calls}) == [2, 5, 7] and len(calls) == 6
    assert trainer.logged_metrics["amp/skipped_steps"] == 1.0
    assert trainer.logged_metrics["amp/loss_scale"] == 2.0**7


class _ManualTwoOptimizers(_Model):
    """GAN-style manual optimization: two optimizers, each stepped every batch; the first overflows at batch 1."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.other = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt_a, opt_b = self.optimizers()
        loss_a = self.net(batch[0]).float().pow(2).mean() * (float("inf") if batch_idx == 1 else 1.0)
        for opt, loss in ((opt_a, loss_a), (opt_b, self.other(batch[0]).float().pow(2).mean())):
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.net.parameters(), lr=0.01), torch.optim.SGD(self.other.parameters(), lr=0.01)


def test_counts_skipped_steps_in_manual_optimization() -> None:
    amp = AutoMixedPrecision()
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**8))
    trainer = _trainer([amp], plugins=[plugin])
    trainer.fit(_ManualTwoOptimizers())
    assert (amp.skipped_steps, amp.optimizer_steps) == (1, 16)  # per optimizer, not per batch
    assert {"amp/loss_scale", "amp/skipped_steps"} <= set(trainer.logged_metrics)


def test_warns_with_the_fix_when_steps_keep_being_skipped() -> None:
    amp = AutoMixedPrecision(max_consecutive_skips=3)
    trainer = _trainer([amp], plugins=[MixedPrecision("16-mixed", "cpu")])
    with pytest.warns(UserWarning, match=r"last 3 optimizer steps were all skipped.*precision='bf16-mixed'") as record:
        trainer.fit(_Model(overflow_at=tuple(range(8))))
    assert sum("were all skipped" in str(w.message) for w in record) == 1  # once per streak
    assert amp.skipped_steps == 8


def test_a_strategy_that_shards_gradients_with_a_plain_scaler_is_refused_with_the_fix() -> None:
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    trainer = types.SimpleNamespace(strategy=types.SimpleNamespace(shards_gradients=True), precision_plugin=plugin)
    with pytest.raises(MisconfigurationException, match=r"plain GradScaler.*ShardAwareGradScaler"):
        AutoMixedPrecision().on_fit_start(trainer, None)  # type: ignore[arg-type]
    # A capability, not a class: the same strategy with a shard-aware scaler, or one that does not shard, passes.
    plugin.scaler = ShardAwareGradScaler("cpu")
    AutoMixedPrecision().on_fit_start(trainer, None)  # type: ignore[arg-type]
    trainer.strategy = types.SimpleNamespace(shards_gradients=False)
    plugin.scaler = torch.amp.GradScaler("cpu")
    AutoMixedPrecision().on_fit_start(trainer, None)  # type: ignore[arg-type]
    assert type(plugin.scaler) is torch.amp.GradScaler  # the callback never swaps scalers


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_resolves_and_monitors_on_a_real_gpu() -> None:
    amp = AutoMixedPrecision()
    precision = amp.resolve_precision("gpu")
    assert precision == ("bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed")
    trainer = quiet_trainer(
        accelerator="gpu",
        max_epochs=1,
        callbacks=[amp],
        plugins=[MixedPrecision("16-mixed", "cuda", scaler=torch.amp.GradScaler("cuda", init_scale=2.0**8))],
    )
    amp.resolved = None  # monitor the explicit 16-mixed plugin instead of the resolved precision
    model = _Model(overflow_at=(3,))
    trainer.fit(model)
    assert model.dtypes == {torch.float16}
    assert (amp.skipped_steps, amp.optimizer_steps) == (1, 8)
    assert trainer.logged_metrics["amp/loss_scale"] == 2.0**7
