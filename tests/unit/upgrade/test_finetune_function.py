"""Rules ``finetune-function`` and ``hook-param`` (``on_before_optimizer_step``): the callback hooks that lost the
optimizer's index in 2.0. 2.x's BaseFinetuning calls ``finetune_function(pl_module, current_epoch, optimizer)`` for
each of ``trainer.optimizers``, and calls a callback's ``on_before_optimizer_step(trainer, pl_module, optimizer)``:
a 1.x override with the index raises TypeError. The index goes; a body that reads it computes what 1.x passed."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

MODULE = """import pytorch_lightning as pl
import torch
from torch import nn


class TwoPart(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(2, 2)
        self.head = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.head(self.trunk(batch[0])).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1)
"""

THAWER = """from pytorch_lightning.callbacks import BaseFinetuning


class TrunkThaw(BaseFinetuning):
    def __init__(self, at_epoch=1):
        super().__init__()
        self.at_epoch = at_epoch
        self.seen = []

    def freeze_before_training(self, pl_module):
        self.freeze(pl_module.trunk)

    def finetune_function(self, pl_module, epoch, optimizer, optimizer_idx):
        self.seen.append((epoch, optimizer_idx))
        if epoch == self.at_epoch:
            self.unfreeze_and_add_param_group(modules=pl_module.trunk, optimizer=optimizer)


class LateThaw(TrunkThaw):
    def finetune_function(self, pl_module, epoch, optimizer, opt_idx):
        super().finetune_function(pl_module, epoch, optimizer, opt_idx)
"""

#: A file's own copy of 1.x's BaseFinetuning (its loop over 1.x's private _get_active_optimizers), subclassed.
VENDORED = """from pytorch_lightning.callbacks import Callback


class BaseFinetuning(Callback):
    def __init__(self):
        self.calls = []

    def on_train_epoch_start(self, trainer, pl_module):
        \"\"\"Each active optimizer.\"\"\"
        # 1.x's own helper
        from pytorch_lightning.loops.utilities import _get_active_optimizers

        for index, optimizer in _get_active_optimizers(trainer.optimizers, trainer.optimizer_frequencies, 0):
            self.finetune_function(pl_module, trainer.current_epoch, optimizer, index)
            self.calls.append(index)

    def finetune_function(
        self,
        pl_module,
        epoch,
        optimizer,
        opt_idx,
    ):
        raise NotImplementedError


class Recorder(BaseFinetuning):
    def finetune_function(self, pl_module, epoch, optimizer, optimizer_idx):
        self.calls.append(("epoch", epoch))
"""

CALLBACK_HOOK = """import pytorch_lightning as pl


class IndexProbe(pl.Callback):
    def __init__(self):
        self.indices = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer, opt_idx):
        self.indices.append(opt_idx)


class Silent(pl.Callback):
    def on_before_optimizer_step(self, trainer, pl_module, optimizer, opt_idx):
        pass


class ModuleProbe(pl.LightningModule):
    def on_before_optimizer_step(self, optimizer, optimizer_idx):
        self.last_index = optimizer_idx
"""


def run(namespace: dict[str, object], module: object, callbacks: list[object], tmp_path, epochs: int = 2) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=epochs, default_root_dir=tmp_path, callbacks=callbacks)
    trainer.fit(module, DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))


def load(source: str) -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(upgraded(source, no_todo=True), "converted", "exec"), namespace)  # noqa: S102
    return namespace


def test_a_finetune_function_that_reads_the_index_computes_it(tmp_path) -> None:
    out = upgraded(THAWER, no_todo=True)
    assert "def finetune_function(self, pl_module, epoch, optimizer):" in out
    assert "optimizer_idx = pl_module.trainer.optimizers.index(optimizer)" in out
    assert "super().finetune_function(pl_module, epoch, optimizer)" in out  # the index not handed on
    assert "opt_idx" not in out  # LateThaw's goes: its body only handed it on
    names = load(MODULE + THAWER)
    model, thaw = names["TwoPart"](), names["TrunkThaw"]()
    run(names, model, [thaw], tmp_path)
    assert thaw.seen == [(0, 0), (1, 0)]  # once per epoch, the one optimizer's index, as 1.x passed it
    assert all(p.requires_grad for p in model.trunk.parameters())  # thawed at epoch 1
    late = names["LateThaw"]()
    run(names, names["TwoPart"](), [late], tmp_path)
    assert late.seen == [(0, 0), (1, 0)]


def test_a_files_own_copy_of_base_finetuning_calls_it_as_2x_does(tmp_path) -> None:
    out = upgraded(VENDORED, no_todo=True)
    assert "_get_active_optimizers" not in out and "optimizer_frequencies" not in out
    assert "for index, optimizer in enumerate(trainer.optimizers):" in out
    assert "self.finetune_function(pl_module, trainer.current_epoch, optimizer)" in out
    names = load(MODULE + VENDORED)
    recorder = names["Recorder"]()
    run(names, names["TwoPart"](), [recorder], tmp_path)
    assert recorder.calls == [("epoch", 0), 0, ("epoch", 1), 0]


def test_the_callbacks_on_before_optimizer_step_loses_its_index(tmp_path) -> None:
    import torch

    out = upgraded(CALLBACK_HOOK, no_todo=True)
    assert "def on_before_optimizer_step(self, trainer, pl_module, optimizer):" in out
    assert "opt_idx = trainer.optimizers.index(optimizer)" in out
    assert "def on_before_optimizer_step(self, optimizer):" in out
    assert "optimizer_idx = self.trainer.optimizers.index(optimizer)" in out
    names = load(CALLBACK_HOOK)

    class TwoOptimizers(names["ModuleProbe"]):  # type: ignore[misc,valid-type]  # written for 2.x: manual
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.a, self.b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            for opt, layer in zip(self.optimizers(), (self.a, self.b)):
                opt.zero_grad()
                self.manual_backward(layer(batch[0]).pow(2).mean())
                opt.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)

    probe, model = names["IndexProbe"](), TwoOptimizers()
    run(names, model, [probe, names["Silent"]()], tmp_path, epochs=1)
    assert probe.indices == [0, 1, 0, 1]  # each optimizer's index among the Trainer's, as 1.x passed it
    assert model.last_index == 1


@pytest.mark.parametrize(
    "signature",
    [
        "(self, pl_module, epoch, optimizer, optimizer_idx, *rest)",
        "(self, pl_module, epoch, optimizer, *, optimizer_idx)",
    ],
)
def test_other_finetune_signatures_keep_a_todo(signature: str) -> None:
    source = THAWER.replace("(self, pl_module, epoch, optimizer, optimizer_idx)", signature)
    assert "TODO(lightning-mgpu:finetune-function)" in upgrade_source(source).source


def test_a_super_call_handing_on_another_index_keeps_a_todo() -> None:
    source = THAWER.replace(
        "super().finetune_function(pl_module, epoch, optimizer, opt_idx)",
        "super().finetune_function(pl_module, epoch, optimizer, 0)",
    )
    assert "TODO(lightning-mgpu:finetune-function)" in upgrade_source(source).source


def test_a_2x_finetune_function_is_left_alone() -> None:
    source = THAWER.replace("(self, pl_module, epoch, optimizer, optimizer_idx)", "(self, pl_module, epoch, optimizer)")
    source = source.replace("        self.seen.append((epoch, optimizer_idx))\n", "")
    source = source.replace(", opt_idx)", ")")
    assert upgrade_source(source).source == source
