"""Rule ``super-removed-hook``: ``return super().on_epoch_start()`` / ``super().on_epoch_end()`` /
``super().training_epoch_end(outputs)`` in a module whose base is LightningModule (directly, or through classes of the
file that do not define the hook). 1.x's LightningModule hooks of those names had an empty body; 2.x has none (the
call raises AttributeError). The call goes, and the merge of ``on_epoch_*`` beside the 2.x hooks and the epoch end
with unused outputs then convert as they do without it."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

# The shape of a template's module: manual optimization, 2.x's validation epoch hooks already there, and the 1.x
# loop hooks each ending in the LightningModule's own (empty) hook.
MANUAL = """import pytorch_lightning as pl
import torch
from torch import nn


class Recorder(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 2)
        self.events = []
        self.ticks = 0
        self.automatic_optimization = False

    def configure_optimizers(self):
        return torch.optim.SGD(self.net.parameters(), lr=0.05)

    def on_epoch_start(self) -> None:
        if not self.trainer.sanity_checking:
            self.events.append("epoch_start")
        return super().on_epoch_start()

    def on_epoch_end(self) -> None:
        self.events.append("epoch_end")
        return super().on_epoch_end()

    def training_epoch_end(self, outputs):
        self.ticks += 1
        self.events.append("training_epoch_end")
        return super().training_epoch_end(outputs)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        loss = self.net(batch[0]).pow(2).mean()
        self.manual_backward(loss)
        opt.step()

    def on_validation_epoch_start(self):
        self.events.append("validation_start")

    def validation_step(self, batch, batch_idx):
        self.net(batch[0])

    def on_validation_epoch_end(self):
        self.events.append("validation_end")
"""


def test_removed_super_calls_go_and_the_hooks_run_in_1x_order(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    result = upgrade_source(MANUAL)
    out = upgraded(MANUAL)
    assert rules.TODO_TAG not in out, out
    assert "super()." not in out.split("def configure_optimizers")[1] and "def training_epoch_end" not in out
    assert [f.rule for f in result.findings].count("super-removed-hook") == 3
    assert "    def on_train_epoch_end(self):\n        self.ticks += 1\n" in out  # outputs was unused but for super
    namespace: dict[str, object] = {}
    exec(compile(out, "recorder", "exec"), namespace)  # noqa: S102
    model = namespace["Recorder"]()
    loader = DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2)
    trainer = quiet_trainer("pytorch_lightning", max_epochs=2, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    # 1.x: on_epoch_start before each loop's epoch-start hook, on_epoch_end after each loop's epoch-end hook (the
    # training one after training_epoch_end); validation runs inside the training epoch.
    one_epoch = [
        "epoch_start",
        "epoch_start",
        "validation_start",
        "validation_end",
        "epoch_end",
        "training_epoch_end",
        "epoch_end",
    ]
    assert model.events == one_epoch * 2
    assert model.ticks == 2


def test_a_return_before_the_end_becomes_a_bare_return() -> None:
    source = MANUAL.replace(
        '        self.events.append("epoch_end")\n        return super().on_epoch_end()\n',
        "        if self.trainer.sanity_checking:\n            return super().on_epoch_end()\n"
        '        self.events.append("epoch_end")\n',
    )
    out = upgraded(source)
    assert "            return\n" in out and rules.TODO_TAG not in out, out


def test_through_a_base_of_the_file_that_lacks_the_hook() -> None:
    source = MANUAL.replace("class Recorder(pl.LightningModule):", "class Recorder(Middle):").replace(
        "import pytorch_lightning as pl\n",
        "import pytorch_lightning as pl\n\n\nclass Middle(pl.LightningModule):\n    pass\n",
    )
    out = upgraded(source)
    assert rules.TODO_TAG not in out and "super().on_epoch" not in out, out


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("class Recorder(pl.LightningModule):", "class Recorder(pl.LightningModule, Mixin):"), "a mixin base"),
        (("class Recorder(pl.LightningModule):", "class Recorder(Imported):"), "a base of another file"),
        (("return super().on_epoch_end()", "return super().on_epoch_end() or 1"), "its value used"),
    ],
)
def test_where_the_base_may_define_the_hook_the_todo_stays(change: tuple[str, str], why: str) -> None:
    out = upgraded(MANUAL.replace(*change))
    assert "TODO(lightning-mgpu:hook-conflict): on_epoch_end became on_train_epoch_end" in out, why
    assert "super().on_epoch_end()" in out, why


def test_a_base_of_the_file_with_the_hook_keeps_the_call() -> None:
    source = MANUAL.replace("class Recorder(pl.LightningModule):", "class Recorder(Middle):").replace(
        "import pytorch_lightning as pl\n",
        "import pytorch_lightning as pl\n\n\nclass Middle(pl.LightningModule):\n"
        "    def on_epoch_end(self):\n        self.log('base', 1.0)\n",
    )
    out = upgraded(source)
    assert "return super().on_epoch_end()" in out
    assert "TODO(lightning-mgpu:hook-conflict): on_epoch_end became on_train_epoch_end" in out
