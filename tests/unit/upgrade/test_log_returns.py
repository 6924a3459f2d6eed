"""``lightning_mgpu.upgrade.hooks`` (rules ``log-returns``, ``log-returns-unfollowed``): the "log"/"progress_bar"
entries of a dict a 1.0 step or epoch end returned, through a local name too, become ``self.log_dict`` calls; the
converted modules train on this Lightning and log what 1.0 logged. And the leftover scan sees such a dict left."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

HEAD = """from collections import OrderedDict

import pytorch_lightning as pl
import torch


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

"""


def fit(source: str, tmp_path, validate: bool = False):
    """The converted module, trained two steps (and validated) with a CSV logger: the trainer after it."""
    import torch
    from pytorch_lightning.loggers import CSVLogger
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict[str, object] = {}
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    model = namespace["Regressor"]()  # type: ignore[operator]
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer, with
    # the CSV logger the tests read what was logged from.
    trainer = quiet_trainer(
        "pytorch_lightning",
        max_steps=2,
        logger=CSVLogger(tmp_path),
        log_every_n_steps=1,
        default_root_dir=tmp_path,
        limit_val_batches=2 if validate else 0,
        num_sanity_val_steps=0,
    )
    data = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
    trainer.fit(model, data, data if validate else None)
    return trainer


STEP_THROUGH_A_NAME = (
    HEAD
    + """    def training_step(self, batch, batch_idx):
        x, y = batch
        mse = torch.nn.functional.mse_loss(self.net(x), y)
        shown = {"mse": mse}
        output = OrderedDict({
            "loss": mse,
            "progress_bar": shown,
            "log": shown
        })
        return output
"""
)


def test_an_ordered_dict_returned_through_a_name_is_logged_once(tmp_path) -> None:
    out = upgraded(STEP_THROUGH_A_NAME)
    assert "        self.log_dict(shown, prog_bar=True)\n        output = OrderedDict({\n" in out
    assert '"log"' not in out and '"progress_bar"' not in out and "return output" in out
    assert not unmarked(out)
    trainer = fit(out, tmp_path)
    # 1.0 showed "mse" on the bar and sent it to the logger, every step
    assert "mse" in trainer.progress_bar_metrics and "mse" in trainer.logged_metrics


OVERLAPPING = (
    HEAD
    + """    def training_step(self, batch, batch_idx):
        x, y = batch
        mse = torch.nn.functional.mse_loss(self.net(x), y)
        bar = {"mse": mse, "shown": mse * 2}
        logs = {"mse": mse, "hidden": mse * 3}
        result = dict(loss=mse, progress_bar=bar, log=logs)
        return result
"""
)


def test_overlapping_dicts_log_each_key_once(tmp_path) -> None:
    """1.0 logged "mse" (in both dicts) to both; 2.x would raise on logging it twice with different arguments."""
    out = upgraded(OVERLAPPING)
    assert (
        "        self.log_dict({k: v for k, v in logs.items() if k not in bar})\n"
        "        self.log_dict(bar, prog_bar=True)\n"
        "        result = dict(loss=mse)\n" in out
    )
    trainer = fit(out, tmp_path)
    assert {"mse", "shown"} <= set(trainer.progress_bar_metrics) and "hidden" not in trainer.progress_bar_metrics
    assert {"mse", "shown", "hidden"} <= set(trainer.logged_metrics)


KEYED_LATER = (
    HEAD
    + """    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return {"val_mse": torch.nn.functional.mse_loss(self.net(x), y)}

    def validation_epoch_end(self, outputs):
        mean = torch.stack([o["val_mse"] for o in outputs]).mean()
        summary = {"val_mse": mean}
        summary["log"] = {"val_mse": mean}
        return summary
"""
)


def test_an_entry_set_by_key_later_is_logged_there(tmp_path) -> None:
    out = upgraded(KEYED_LATER)
    assert (
        '        summary = {"val_mse": mean}\n        self.log_dict({"val_mse": mean})\n        return summary\n' in out
    )
    trainer = fit(out, tmp_path, validate=True)
    assert "val_mse" in trainer.logged_metrics and "val_mse" in trainer.callback_metrics


def test_the_same_dict_in_both_entries_of_a_returned_literal_runs(tmp_path) -> None:
    """The literal case: ``return {"log": logs, "progress_bar": logs}`` logged each key twice (2.x raises)."""
    source = KEYED_LATER.replace(
        '        summary = {"val_mse": mean}\n        summary["log"] = {"val_mse": mean}\n        return summary\n',
        '        logs = {"val_mse": mean}\n        return {"log": logs, "progress_bar": logs}\n',
    )
    out = upgraded(source)
    assert "        self.log_dict(logs, prog_bar=True)\n" in out and "self.log_dict(logs)\n" not in out
    trainer = fit(out, tmp_path, validate=True)
    assert "val_mse" in trainer.progress_bar_metrics and "val_mse" in trainer.logged_metrics


@pytest.mark.parametrize(
    "use",
    [
        "        record(output)\n",  # handed to a function
        "        output.update(extra=1)\n",  # updated through a method
        "        alias = output\n",  # aliased
        '        output["progress_bar"] = shown\n        output["log"] = shown\n',  # both entries by key
    ],
)
def test_a_name_the_rule_cannot_follow_keeps_a_todo(use: str) -> None:
    source = STEP_THROUGH_A_NAME.replace("        return output\n", use + "        return output\n")
    if 'output["log"]' in use:  # the entries set by key only
        source = source.replace('            "progress_bar": shown,\n            "log": shown\n', "")
    out = upgraded(source)
    todo = rules.TODO_PREFIX + "log-returns-unfollowed): output: 2.x ignores"
    assert todo in out and "self.log_dict(shown" not in out
    assert not unmarked(out)


def test_the_leftover_scan_sees_log_entries_returned() -> None:
    assert [what for _, what in unmarked(STEP_THROUGH_A_NAME)] == ['training_step returns "log"/"progress_bar"']
    literal = HEAD + '    def test_step(self, batch, batch_idx):\n        return dict(log={"a": 1})\n'
    assert [what for _, what in unmarked(literal)] == ['test_step returns "log"/"progress_bar"']
    # a plain torch module's method of the same name is its own
    plain = "class Net(nn.Module):\n    def training_step(self, batch):\n        return {'log': batch}\n"
    assert not unmarked(plain)
    # a nested function's dict is not the hook's
    nested = (
        HEAD + "    def training_step(self, batch, batch_idx):\n"
        "        def pack():\n            return {'log': batch}\n        return self.net(batch[0]).sum()\n"
    )
    assert not unmarked(nested)


def test_a_dict_call_in_the_return_itself(tmp_path) -> None:
    source = STEP_THROUGH_A_NAME.replace(
        '        output = OrderedDict({\n            "loss": mse,\n            "progress_bar": shown,\n'
        '            "log": shown\n        })\n        return output\n',
        "        return dict(loss=mse, log=shown)\n",
    )
    out = upgraded(source)
    assert "        self.log_dict(shown)\n        return dict(loss=mse)\n" in out and not unmarked(out)
    trainer = fit(out, tmp_path)
    assert "mse" in trainer.logged_metrics
