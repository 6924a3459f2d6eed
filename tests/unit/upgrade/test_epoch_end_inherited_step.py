"""Rule ``epoch-end``: a 1.x evaluation epoch end in a class whose step is inherited from another file (a helper
method handed the outputs, its value returned). 2.x hands each evaluation step's output to
``on_validation_batch_end``/``on_test_batch_end``: the class gets that hook, collecting the outputs as 1.x's loop kept
them for the epoch end (a None output left out, a list per dataloader where there are several). The training epoch
end keeps its TODO: 1.x's list there depended on the optimizers, which the file does not show."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

#: The base, as it would be in another file (already 2.x: it has no epoch ends of its own).
ELSEWHERE = """import pytorch_lightning as pl
import torch
from torch import nn


class Scorer(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        if batch_idx == 1:
            return None  # 1.x left it out of the epoch end's list
        return {"ids": batch[1], "loader": dataloader_idx}

    def test_step(self, batch, batch_idx):
        return {"ids": batch[1]}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""

CHECKER = """import pytorch_lightning as pl
import torch


class IdChecker(Scorer):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def record(self, outputs, stage):
        self.seen.setdefault(stage, []).append(outputs)

    def validation_epoch_end(self, outputs):
        return self.record(outputs, "val")

    def test_epoch_end(self, outputs):
        \"\"\"All ids.\"\"\"
        return self.record(outputs, "test")
"""


def _loader(start: int):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(torch.randn(6, 2), torch.arange(start, start + 6)), batch_size=2)


def _checker(tmp_path):
    out = upgraded(CHECKER)
    namespace: dict[str, object] = {}
    exec(compile(ELSEWHERE, "elsewhere", "exec"), namespace)  # noqa: S102
    exec(compile(out, "checker", "exec"), namespace)  # noqa: S102
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, num_sanity_val_steps=0, default_root_dir=tmp_path)
    return out, namespace["IdChecker"](), trainer  # type: ignore[operator]


def test_the_outputs_are_collected_by_the_batch_end_hooks(tmp_path) -> None:
    import torch

    out, model, trainer = _checker(tmp_path)
    assert rules.TODO_TAG not in out
    assert "def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):" in out
    assert "def on_test_epoch_end(self):" in out and "validation_step_outputs" not in out
    trainer.fit(model, _loader(0), _loader(100))
    (val,) = model.seen["val"]
    # one loader: 1.x's flat list of the step outputs, the None of batch 1 left out
    assert [o["ids"].tolist() for o in val] == [[100, 101], [104, 105]]
    trainer.test(model, _loader(200))
    (test,) = model.seen["test"]
    assert torch.cat([o["ids"] for o in test]).tolist() == list(range(200, 206))
    assert model.validation_batch_outputs == {} and model.test_batch_outputs == {}  # emptied by each epoch end


def test_several_loaders_give_a_list_per_loader(tmp_path) -> None:
    out, model, trainer = _checker(tmp_path)
    trainer.fit(model, _loader(0), [_loader(100), _loader(300)])
    (val,) = model.seen["val"]
    assert [[o["loader"] for o in per_loader] for per_loader in val] == [[0, 0], [1, 1]]
    assert [o["ids"].tolist() for o in val[1]] == [[300, 301], [304, 305]]


def test_the_training_epoch_end_keeps_its_todo() -> None:
    source = CHECKER + '\n    def training_epoch_end(self, outputs):\n        return self.record(outputs, "train")\n'
    out = upgrade_source(source).source
    assert "TODO(lightning-mgpu:epoch-end)" in out and "def on_validation_batch_end" in out


def test_a_class_with_the_batch_end_hook_keeps_the_todo() -> None:
    source = CHECKER + (
        "\n    def on_validation_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):\n        pass\n"
    )
    assert "TODO(lightning-mgpu:epoch-end)" in upgrade_source(source).source


@pytest.mark.parametrize("base", ["pl.Callback", "pl.LightningDataModule"])
def test_a_callbacks_or_datamodules_method_of_the_name_keeps_the_todo(base: str) -> None:
    source = CHECKER.replace("class IdChecker(Scorer):", f"class IdChecker({base}):")
    out = upgrade_source(source).source
    assert "on_validation_batch_end" not in out and "TODO(lightning-mgpu:epoch-end)" in out


def test_a_subclass_whose_own_epoch_end_converted_beside_the_base_converts_once() -> None:
    # A subclass's own epoch end reads its own step's outputs and converts; a sibling whose step returns nothing has
    # an epoch end that reads nothing, so no reading hook ran on its instances and the base's converts too
    # (test_epoch_end_steps_that_hand_nothing.py). A second run must not collect a second time.
    source = (
        "import torch\n"
        "import pytorch_lightning as pl\n\n\n"
        "class Detector(pl.LightningModule):\n"
        "    def validation_step(self, batch, batch_idx):\n"
        "        return batch_idx, self.criterion(batch)\n\n"
        "    def validation_epoch_end(self, outputs):\n"
        "        self.log('parts', float(len(outputs)))\n\n\n"
        "class WebDetector(Detector):\n"
        "    def validation_step(self, batch, batch_idx):\n"
        "        loss = self.criterion(batch) * 2\n"
        "        return loss\n\n"
        "    def validation_epoch_end(self, outputs):\n"
        "        self.log('val_loss', torch.stack(outputs).mean())\n\n\n"
        "class FusedDetector(Detector):\n"
        "    def validation_step(self, batch, batch_idx):\n"
        "        self.metric.update(self(batch), batch)\n\n"
        "    def validation_epoch_end(self, outputs):\n"
        "        self.log('map', self.metric.compute())\n"
    )
    out = upgraded(source, no_todo=True)  # a second run changes nothing
    web = out[out.index("class WebDetector") : out.index("class FusedDetector")]
    assert web.count("self.validation_step_outputs.append(loss)") == 1
    assert "def on_validation_epoch_end(self):" in web
    assert "append" not in out[out.index("class FusedDetector") :]  # its step hands nothing: nothing collected
