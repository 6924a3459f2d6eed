"""``lightning_mgpu.upgrade.leftovers``: the independent scan finds each 1.x spelling it names, and a TODO above a
statement marks the whole statement."""

from __future__ import annotations

import pytest

from lightning_mgpu.upgrade.leftovers import leftovers, unmarked


def test_it_finds_removed_names_attributes_and_hooks() -> None:
    source = (
        "from pytorch_lightning.utilities.types import EPOCH_OUTPUT\n"
        "from torchmetrics import Accuracy\n"
        "import torchmetrics as tm\n"
        "device = trainer.root_gpu\n"
        "plugin = self.trainer.training_type_plugin\n"
        "finder = trainer.tuner.lr_find(model)\n"
        "trainer.tune(model)\n"
        "acc = Accuracy()\n"
        "f1 = tm.F1Score(num_classes=3)\n"
        "ok = Accuracy(task='multiclass', num_classes=3)\n"
        "class C(Callback):\n"
        "    def on_train_epoch_end(self, trainer, pl_module, outputs):\n"
        "        pass\n"
        "lr = trainer.lr_find(model)\n"
    )
    assert {what for _, what in leftovers(source)} == {
        "import EPOCH_OUTPUT",
        "trainer.root_gpu",
        "trainer.training_type_plugin",
        "trainer.tuner",
        "trainer.tune(...)",
        "trainer.lr_find(...)",
        "torchmetrics metric without task=",
        "def on_train_epoch_end(..., outputs)",
    }
    assert [line for line, what in leftovers(source) if what.startswith("torchmetrics")] == [8, 9]


def test_a_todo_marks_the_statement_below_it_only() -> None:
    source = (
        "# TODO(lightning-mgpu:x): y\n# another comment\ntrainer = Trainer(\n    gpus=2,\n)\nother = Trainer(gpus=1)\n"
    )
    assert leftovers(source) == [(3, "Trainer(gpus=...)"), (6, "Trainer(gpus=...)")]
    assert unmarked(source) == [(6, "Trainer(gpus=...)")]


def test_2x_code_has_no_leftovers() -> None:
    source = (
        "from lightning.pytorch.tuner import Tuner\n"
        "trainer = Trainer(accelerator='gpu', devices=2, strategy='ddp')\n"
        "lr = Tuner(trainer).lr_find(model).suggestion()\n"
        "device = trainer.strategy.root_device\n"
        "class C(Callback):\n    def on_train_epoch_end(self, trainer, pl_module):\n        pass\n"
    )
    assert leftovers(source) == []


def test_a_metric_given_its_task_by_position_is_not_a_leftover() -> None:
    """torchmetrics >= 0.11 takes the task as its first positional argument (``Accuracy("binary")``)."""
    source = "from torchmetrics import Accuracy\nacc = Accuracy('binary', num_classes=2)\nbad = Accuracy(2)\n"
    assert leftovers(source) == [(3, "torchmetrics metric without task=")]


def test_hparams_assigned_in_a_class_that_cannot_be_a_lightning_module_is_its_own() -> None:
    """``self.hparams = ...`` is 1.x's only in a class that may be a LightningModule: not in a class with no base, or
    deriving from ``object`` or ``nn.Module`` alone (a user's own ``class Trainer():`` keeping a dict)."""
    source = (
        "class Trainer():\n    def __init__(self, hparams):\n        self.hparams = hparams\n"
        "class Net(nn.Module):\n    def __init__(self, hparams):\n        self.hparams = hparams\n"
        "class Model(pl.LightningModule):\n    def __init__(self, hparams):\n        self.hparams = hparams\n"
    )
    assert leftovers(source) == [(9, "self.hparams = ...")]


def test_a_settings_key_is_no_leftover_where_its_dict_never_reaches_a_trainer() -> None:
    """leftover_reach: a config whose fields a Trainer call reads one by one holds the script's own keys."""
    source = (
        "opts = {'gpus': [0], 'epochs': 2}\n"
        "opts['resume_from_checkpoint'] = None\n"
        "net = Net(opts)\n"
        "trainer = Trainer(accelerator='gpu', devices=opts['gpus'], max_epochs=opts['epochs'])\n"
        "trainer.fit(net, ckpt_path=opts['resume_from_checkpoint'])\n"
    )
    assert leftovers(source) == []


@pytest.mark.parametrize(
    "use",
    [
        "Trainer(**opts)",  # splatted
        "launch(*opts)",  # splatted, positionally
        "Trainer(opts)",  # handed whole to a Trainer
        "my_trainer = build(opts)",  # a call whose result is named like a trainer
        "engine = build(opts)\nengine.fit(net)",  # ... or is fitted
        "go(opts)\ndef go(o):\n    return Trainer(**o)",  # a parameter of the file's function, splatted
        "def make():\n    return opts",  # returned to a caller elsewhere
        "def make():\n    return opts\nrun(make)",  # a function handed around: its callers are elsewhere
        "key = lambda: opts",  # a use the scan does not follow
        "copied = dict(opts)\ninstantiate(copied)",  # through a copy into hydra
    ],
)
def test_a_settings_key_is_a_leftover_where_its_dict_may_reach_a_trainer(use: str) -> None:
    source = f"opts = {{'gpus': 2}}\n{use}\n"
    assert leftovers(source) == [(1, "{'gpus': ...}")], use


@pytest.mark.parametrize(
    "source",
    [
        "run([{'gpus': 2}])\n",  # in a list handed to a call: no holder to follow
        "class Job:\n    opts = {'gpus': 2}\n",  # a class attribute
        "get()['gpus'] = 2\n",  # into a call's result
    ],
)
def test_a_settings_key_without_a_holder_the_scan_follows_is_a_leftover(source: str) -> None:
    assert [what for _, what in leftovers(source)] in (["{'gpus': ...}"], ["['gpus'] = ..."]), source
