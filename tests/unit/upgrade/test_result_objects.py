"""``lightning_mgpu.upgrade.result_objects`` (rules ``result-object-log``, ``result-object-monitor``; the TODO
``result-object`` where the object is not followed): Lightning 1.0's TrainResult/EvalResult -> self.log, and the
converted module trains on this Lightning logging what 1.0 logged, with 1.0's on_step/on_epoch."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

HEAD = """import pytorch_lightning as pl
import torch
from pytorch_lightning import EvalResult, TrainResult


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def mse(self, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

"""

STEPS = (
    HEAD
    + """    def training_step(self, batch, batch_idx):
        loss = self.mse(batch)
        result = TrainResult(minimize=loss)
        result.log("fit_mse", loss, prog_bar=True)
        result.log_dict({"fit_twice": loss * 2})
        return result

    def validation_step(self, batch, batch_idx):
        loss = self.mse(batch)
        result = pl.EvalResult(checkpoint_on=loss)
        result.log("val_mse", loss)
        return result

    def test_step(self, batch, batch_idx):
        result = EvalResult(self.mse(batch))
        result.log_dict({"test_mse": self.mse(batch)}, on_step=True)
        return result

    def test_epoch_end(self, outputs):
        return EvalResult()
"""
)


def trainer_for(tmp_path, callbacks=()):
    from pytorch_lightning.loggers import CSVLogger

    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer, with
    # the CSV logger the tests read what was logged from, and checkpointing where a test hands a checkpoint callback.
    return quiet_trainer(
        "pytorch_lightning",
        max_epochs=2,
        logger=CSVLogger(tmp_path),
        log_every_n_steps=1,
        enable_checkpointing=bool(callbacks),
        callbacks=list(callbacks),
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
    )


def module_and_data(source: str):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict[str, object] = {}
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    data = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
    return namespace["Regressor"](), data  # type: ignore[operator]


def test_the_hooks_log_through_self_log_with_1_0s_defaults() -> None:
    out = upgraded(STEPS)
    assert "TrainResult" not in out and "EvalResult" not in out and "TODO" not in out and not unmarked(out)
    assert "from pytorch_lightning import" not in out  # the import went with its last use
    assert '        result = loss\n        self.log("fit_mse", loss, prog_bar=True)\n' in out
    # TrainResult.log_dict logged epoch means (2.x's training_step default is per step)
    assert (
        '        self.log_dict({"fit_twice": loss * 2}, on_step=False, on_epoch=True)\n        return result\n' in out
    )
    note = "        # " + rules.note_text("result-object-monitor") + '\n        self.log("checkpoint_on", loss)\n'
    assert note + '        self.log("val_mse", loss)\n\n' in out
    # EvalResult(x): x is early_stop_on; on_step=True given: kept
    assert '        self.log("early_stop_on", self.mse(batch))\n' in out
    assert '        self.log_dict({"test_mse": self.mse(batch)}, on_step=True)\n\n' in out
    # test_epoch_end returned a bare EvalResult: the converted hook returns nothing
    assert "    def on_test_epoch_end(self):\n        pass\n" in out


def test_the_converted_module_trains_and_logs_what_1_0_logged(tmp_path) -> None:
    from pytorch_lightning.callbacks import ModelCheckpoint

    model, data = module_and_data(upgraded(STEPS))
    # 1.0 checkpointed on checkpoint_on by itself; 2.x when told (the NOTE's advice)
    checkpoint = ModelCheckpoint(monitor="checkpoint_on", dirpath=tmp_path / "ckpt")
    trainer = trainer_for(tmp_path, [checkpoint])
    trainer.fit(model, data, data)
    logged = trainer.logged_metrics
    assert "fit_mse" in trainer.progress_bar_metrics and "fit_mse" in logged
    assert "fit_twice" in logged and "fit_twice_step" not in logged  # on_epoch only, as 1.0's log_dict
    assert {"val_mse", "checkpoint_on"} <= set(trainer.callback_metrics)
    assert checkpoint.best_model_score is not None
    trainer.test(model, data)
    assert {"early_stop_on", "test_mse_epoch"} <= set(trainer.callback_metrics)


@pytest.mark.parametrize(
    "line",
    [
        "        self.keep(result)\n",  # handed on
        "        print(result.minimize)\n",  # an attribute read
        '        result.log("x", loss, sync_dist_op="sum")\n',  # a 1.0-only keyword
    ],
)
def test_an_object_used_otherwise_keeps_its_todo(line: str) -> None:
    source = STEPS.replace("        return result\n", line + "        return result\n", 1)
    out = upgraded(source)
    assert rules.TODO_PREFIX + "result-object): TrainResult is gone" in out
    assert "result = TrainResult(minimize=loss)" in out and not unmarked(out)
    # the import stays (with its TODO) while a use of the name stays
    assert "import EvalResult, TrainResult" in out


def test_hiddens_and_a_step_whose_outputs_an_epoch_end_reads_keep_the_todo() -> None:
    source = (
        HEAD
        + """    def training_step(self, batch, batch_idx, hiddens):
        loss = self.mse(batch)
        return pl.TrainResult(loss, hiddens=hiddens)

    def validation_step(self, batch, batch_idx):
        result = pl.EvalResult()
        result.log("val_mse", self.mse(batch))
        return result

    def validation_epoch_end(self, outputs):
        self.log("mean", outputs.val_mse.mean())
"""
    )
    out = upgraded(source)
    assert out.count(rules.TODO_PREFIX + "result-object)") >= 3 and not unmarked(out)
    assert "result.log(" in out


def test_pytorch_lightning_is_not_needed_by_the_analysis_of_a_plain_class() -> None:
    """A class without a base is not a Lightning module: its methods' objects are not touched."""
    source = "class Plain:\n    def training_step(self, loss):\n        r = TrainResult(loss)\n        return r\n"
    out = upgraded(source)
    assert "r = TrainResult(loss)" in out and "TODO(lightning-mgpu:result-object)" in out


def test_an_import_nothing_reads_goes() -> None:
    # A 1.0 script kept importing TrainResult after its steps moved to self.log; 2.x has no such name, and nothing
    # in the file reads it.
    source = (
        "from pytorch_lightning import LightningModule, TrainResult, seed_everything\n\n\n"
        "class Graph(LightningModule):\n"
        "    def training_step(self, batch, batch_idx):\n"
        "        loss = self.criterion(batch)\n"
        "        self.log('train_loss', loss)\n"
        "        return loss\n"
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert out.startswith("from pytorch_lightning import LightningModule, seed_everything\n")
    # Named once more (here in a type annotation), it is read: the TODO stays.
    kept = upgraded(
        source.replace(
            "def training_step(self, batch, batch_idx):", "def training_step(self, batch, batch_idx) -> TrainResult:"
        )
    )
    assert rules.TODO_TAG + "result-object)" in kept
