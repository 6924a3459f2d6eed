"""A user's own method under a renamed hook's name (rule ``renamed-hook`` leaves it): 1.x called ``on_epoch_end`` of a
LightningModule with no argument (a callback's with trainer and pl_module), so ``on_epoch_end(self, outputs,
phase)``, which 2.x-era code calls itself from its epoch-end hooks (two real files of the fourth held-out draw), is
not the hook: no rename, no ``hook-conflict`` TODO, and the leftover scan does not name it."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.transform import upgrade_source

SHARED_END = """import pytorch_lightning as pl


class Scorer(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.train_outputs = []
        self.val_outputs = []

    def on_epoch_end(self, outputs, phase):
        self.log(f"{phase}_n", float(len(outputs)))

    def on_train_epoch_end(self):
        self.on_epoch_end(self.train_outputs, phase="train")
        self.train_outputs.clear()

    def on_validation_epoch_end(self):
        self.on_epoch_end(self.val_outputs, "val")
"""


def test_a_method_1x_could_not_have_called_is_left_as_it_is() -> None:
    result = upgrade_source(SHARED_END)
    assert result.source == SHARED_END and not result.findings
    assert unmarked(SHARED_END) == []


@pytest.mark.parametrize(
    ("signature", "hook"),
    [
        ("(self)", True),  # the module's hook
        ("(self, outputs=None)", True),  # callable with nothing: 1.x called it
        ("(self, outputs, phase)", False),
    ],
)
def test_a_module_method_is_the_hook_where_1x_could_call_it(signature: str, hook: bool) -> None:
    source = SHARED_END.replace("def on_epoch_end(self, outputs, phase):", f"def on_epoch_end{signature}:")
    left = [kind for _, kind in unmarked(source)]
    assert ("def on_epoch_end" in left) == hook
    out = upgrade_source(source).source
    assert ("TODO(lightning-mgpu:" in out or "def on_epoch_end" not in out) == hook


def test_a_callbacks_hook_takes_trainer_and_module() -> None:
    """A callback's ``on_epoch_end(self, trainer, pl_module)`` is 1.x's hook (renamed); one needing a third argument
    is not."""
    callback = "from pytorch_lightning import Callback\nclass Timer(Callback):\n    def on_epoch_end{}:\n        pass\n"
    assert (
        "def on_train_epoch_end(self, trainer, pl_module):"
        in upgrade_source(callback.format("(self, trainer, pl_module)")).source
    )
    own = callback.format("(self, trainer, pl_module, phase)")
    assert upgrade_source(own).source == own and unmarked(own) == []
