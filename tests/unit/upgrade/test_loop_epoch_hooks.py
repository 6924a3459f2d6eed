"""Rule ``renamed-hook``: ``on_epoch_start``/``on_epoch_end`` in a class that already has the 2.x hooks they become
(the lightning-hydra-template's ``on_epoch_end`` resetting metrics beside ``training_epoch_end``, which becomes
``on_train_epoch_end``). 1.x ran ``on_epoch_start`` before each loop's own epoch-start hook and ``on_epoch_end`` after
each loop's own epoch-end hook, in training, validation and test: the converted module does the same, in that order."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from tests.helpers.tiny import tiny_module
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

TEMPLATE = """import pytorch_lightning as pl
import torch
from torch import nn


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.events = []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def training_epoch_end(self, outputs):
        # outputs: what training_step returned
        pass

    def validation_step(self, batch, batch_idx):
        return {"size": len(batch[0])}

    def validation_epoch_end(self, outputs):
        self.events.append(("validation_epoch_end", len(outputs)))

    def test_step(self, batch, batch_idx):
        return None

    def on_validation_epoch_start(self):
        \"\"\"Its own start.\"\"\"
        self.events.append("on_validation_epoch_start")

    def on_epoch_start(self):
        self.events.append("on_epoch_start")

    def on_epoch_end(self):
        # reset metrics at the end of every epoch
        self.events.append("on_epoch_end")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_loop_epoch_hooks_run_where_1x_ran_them(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(TEMPLATE)
    assert rules.TODO_TAG not in out, out
    assert "    def on_train_epoch_end(self):\n        # outputs: what training_step returned\n" in out
    assert "on_test_epoch_end = _on_epoch_end_1x" in out and "on_train_epoch_start = _on_epoch_start_1x" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "template", "exec"), namespace)  # noqa: S102
    model = namespace["Classifier"]()
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    # 1.x's order: the training epoch starts; its validation runs before the training epoch's own end.
    assert model.events == [
        "on_epoch_start",
        "on_epoch_start",
        "on_validation_epoch_start",
        ("validation_epoch_end", 2),
        "on_epoch_end",
        "on_epoch_end",
    ]
    model.events.clear()
    trainer.test(model, loader, verbose=False)
    assert model.events == ["on_epoch_start", "on_epoch_end"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("        pass\n", "        if outputs: return\n"), "a return on a one-line if"),
        (("        pass\n", "        if outputs:\n            return len(outputs)\n"), "a return with a value"),
        (
            (
                "        pass\n",
                "        try:\n            return\n        finally:\n            self.events.append(0)\n",
            ),
            "a finally clause that 1.x ran before on_epoch_end",
        ),
        # (a direct LightningModule's super().on_epoch_end() did nothing: test_super_removed_hook.py)
        (('self.events.append("on_epoch_end")', "super().on_epoch_end()"), "the old hook calls a mixin's"),
    ],
)
def test_what_cannot_be_merged_exactly_stays_a_todo(change: tuple[str, str], why: str) -> None:
    source = TEMPLATE.replace("(pl.LightningModule):", "(pl.LightningModule, Mixin):")
    out = upgraded(source.replace(*change))
    assert "TODO(lightning-mgpu:hook-conflict): on_epoch_end became on_train_epoch_end" in out, why
    assert "def on_epoch_end(self):" in out


def test_an_early_return_still_runs_on_epoch_end_after_the_hook(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    # 1.x ran on_epoch_end after on_train_epoch_end however that returned.
    source = TEMPLATE.replace(
        "    def training_epoch_end(self, outputs):\n        # outputs: what training_step returned\n        pass\n",
        "    def on_train_epoch_end(self):\n"
        "        if self.current_epoch == 0:\n"
        '            self.events.append("early")\n'
        "            return\n"
        '        self.events.append("late")\n'
        "        return None\n",
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert out.count("self._on_epoch_end_1x()\n") == 3, out  # before each return, and in on_validation_epoch_end
    namespace: dict[str, object] = {}
    exec(compile(out, "template", "exec"), namespace)  # noqa: S102
    model = namespace["Classifier"]()
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer = quiet_trainer("pytorch_lightning", max_epochs=2, limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(model, loader)
    ends = [e for e in model.events if e in ("early", "late", "on_epoch_end")]
    assert ends == ["early", "on_epoch_end", "late", "on_epoch_end"]


CALLBACK = """from pytorch_lightning.callbacks import Callback


class EpochCounter(Callback):
    def __init__(self):
        self.any_epoch = 0
        self.train_epochs = 0

    def on_epoch_end(self, trainer, pl_module):
        self.any_epoch += 1

    def on_train_epoch_end(self, trainer, pl_module, unused=None):
        self.train_epochs += 1
"""


def test_a_callback_hook_with_an_extra_defaulted_parameter_merges(tmp_path) -> None:
    pytest.importorskip("pytorch_lightning")
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(CALLBACK, no_todo=True, no_unmarked=True)
    assert "def on_train_epoch_end(self, trainer, pl_module, unused=None):" in out
    assert "self._on_epoch_end_1x(trainer, pl_module)" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "callback", "exec"), namespace)  # noqa: S102
    counter = namespace["EpochCounter"]()
    model = tiny_module("pytorch_lightning")
    model.validation_step = lambda batch, batch_idx: None
    loader = DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2)
    trainer = quiet_trainer(
        "pytorch_lightning", max_epochs=2, num_sanity_val_steps=0, callbacks=[counter], default_root_dir=tmp_path
    )
    trainer.fit(model, loader, loader)
    # 1.2 to 1.9: on_epoch_end after each training and each validation epoch.
    assert counter.train_epochs == 2 and counter.any_epoch == 4


@pytest.mark.parametrize(
    "signature", ["(self, trainer, pl_module, unused)", "(self, trainer, model, unused=None)", "(self, *args)"]
)
def test_a_callback_hook_under_other_parameters_keeps_the_todo(signature: str) -> None:
    source = CALLBACK.replace("(self, trainer, pl_module, unused=None)", signature)
    assert "TODO(lightning-mgpu:hook-conflict)" in upgraded(source)
