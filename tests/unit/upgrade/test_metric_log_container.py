"""TODO ``metric-log-container`` (``lightning_mgpu.upgrade.metric_containers``): ``self.log(name, metric)`` of a
Metric kept in a plain list or dict, which 1.3 logged (its compute() at the epoch's end) and 2.x refuses: the call
gets the TODO; a Metric kept as a submodule, or a value logged from the loop, gets none."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

SOURCE = """import pytorch_lightning as pl
import torch


class Tagger(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 4)
        self.scorers = [("hits", pl.metrics.Accuracy())]

    def validation_step(self, batch, batch_idx):
        x, y = batch
        guess = self.proj(x).argmax(-1)
        for label, scorer in self.scorers:
            scorer(guess, y)
            self.log("val_" + label, scorer)
"""

TODO = rules.todo_text("metric-log-container")


def test_the_log_call_of_a_listed_metric_gets_the_todo() -> None:
    out = upgraded(SOURCE)
    assert f'            # {TODO}\n            self.log("val_" + label, scorer)\n' in out
    assert out.count(TODO) == 1


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (('self.log("val_" + label, scorer)', 'self.log("val_" + label, scorer.compute())'), "a value is logged"),
        (
            ('[("hits", pl.metrics.Accuracy())]', 'torch.nn.ModuleDict({"hits": pl.metrics.Accuracy(num_classes=4)})'),
            "a submodule",
        ),
    ],
)
def test_a_value_or_a_submodule_gets_none(change: tuple[str, str], why: str) -> None:
    source = SOURCE.replace(*change)
    if "ModuleDict" in source:
        source = source.replace("in self.scorers:", "in self.scorers.items():")
    assert TODO not in upgraded(source), why


def test_2x_refuses_the_listed_metric_the_todo_marks(tmp_path) -> None:
    import torch
    from pytorch_lightning.utilities.exceptions import MisconfigurationException
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(SOURCE)
    namespace: dict[str, object] = {}
    exec(compile(out, "tagger", "exec"), namespace)  # noqa: S102
    model = namespace["Tagger"]()
    loader = DataLoader(TensorDataset(torch.randn(4, 3), torch.randint(0, 4, (4,))), batch_size=2)
    trainer = quiet_trainer("pytorch_lightning", default_root_dir=tmp_path)
    with pytest.raises(MisconfigurationException, match="Could not find the `LightningModule` attribute"):
        trainer.validate(model, loader, verbose=False)
