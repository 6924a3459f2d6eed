"""Rule ``renamed-hook`` by release (``lightning_mgpu.upgrade.era``): 1.0-1.1 ran ``on_epoch_start``/``on_epoch_end``
in training epochs only, 1.2.6-1.7 in every loop's. A file that names TrainResult/EvalResult (1.0-1.1 only) keeps
its hooks to the training epochs; any other file is taken as 1.3-1.7 code and gets them in every loop. Each converted
module runs on this Lightning and calls its hooks where the Trainer of its release called them."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.era import epoch_hooks_train_only
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

#: A 1.0-style module: its steps return a TrainResult/EvalResult, and its epoch hooks count the epochs.
RESULTS_ERA = """import pytorch_lightning as pl
import torch


class Sampler(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.gen = torch.nn.Linear(2, 2)
        self.seen = []

    def training_step(self, batch, batch_idx):
        loss = self.gen(batch[0]).abs().mean()
        result = pl.TrainResult(minimize=loss)
        result.log("gen_loss", loss)
        return result

    def validation_step(self, batch, batch_idx):
        result = pl.EvalResult()
        result.log("val_gen", self.gen(batch[0]).abs().mean())
        return result

    def on_epoch_start(self):
        self.seen.append("start")

    def on_epoch_end(self):
        # draw a few samples at the end of each epoch
        self.seen.append("end")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""

#: The same module as 1.3-1.7 wrote it (self.log in the steps): its release is not in its text.
LOG_ERA = RESULTS_ERA.replace(
    '        result = pl.TrainResult(minimize=loss)\n        result.log("gen_loss", loss)\n        return result\n',
    '        self.log("gen_loss", loss)\n        return loss\n',
).replace(
    '        result = pl.EvalResult()\n        result.log("val_gen", self.gen(batch[0]).abs().mean())\n'
    "        return result\n",
    '        self.log("val_gen", self.gen(batch[0]).abs().mean())\n',
)


def run(out: str, tmp_path) -> list[str]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict[str, object] = {}
    exec(compile(out, "sampler", "exec"), namespace)  # noqa: S102
    model = namespace["Sampler"]()
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer = quiet_trainer("pytorch_lightning", max_epochs=2, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    return model.seen


def test_the_era_is_read_off_result_objects() -> None:
    assert epoch_hooks_train_only(cst.parse_module(RESULTS_ERA))
    assert epoch_hooks_train_only(cst.parse_module("from pytorch_lightning import EvalResult\n"))
    assert not epoch_hooks_train_only(cst.parse_module(LOG_ERA))
    # "log" dicts returned from a step do not tell: files that pinned 1.4 kept them.
    assert not epoch_hooks_train_only(cst.parse_module('def training_step(self, b, i):\n    return {"log": {}}\n'))


def test_1_0_code_runs_its_epoch_hooks_in_training_epochs_only(tmp_path) -> None:
    out = upgraded(RESULTS_ERA, no_todo=True, no_unmarked=True)
    assert "def on_train_epoch_start(self):" in out and "def on_train_epoch_end(self):" in out
    assert "on_validation_epoch_end" not in out and "on_test_epoch_start" not in out
    # 1.0's training loop called both once a training epoch; its evaluation loop called neither.
    assert run(out, tmp_path) == ["start", "end", "start", "end"]


def test_code_of_an_unknown_release_runs_them_in_every_loop(tmp_path) -> None:
    out = upgraded(LOG_ERA, no_todo=True, no_unmarked=True)
    assert "on_validation_epoch_end = on_train_epoch_end" in out
    # 1.3-1.7: each validation epoch (run inside the training epoch, before its end) starts and ends them too.
    assert run(out, tmp_path) == ["start", "start", "end", "end"] * 2


def test_1_0_code_beside_a_validation_hook_is_no_conflict(tmp_path) -> None:
    # A 1.0 module's own on_validation_epoch_end is its own: on_epoch_end does not run there, so nothing merges.
    source = RESULTS_ERA.replace(
        "    def on_epoch_start(self):",
        '    def on_validation_epoch_end(self):\n        self.seen.append("val")\n\n    def on_epoch_start(self):',
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert "_on_epoch_end_1x" not in out and rules.TODO_TAG not in out
    assert run(out, tmp_path) == ["start", "val", "end", "start", "val", "end"]
