"""Rule ``epoch-end``: a 1.x epoch end in a class that also has the 2.x hook it becomes (``validation_epoch_end``
beside ``on_validation_epoch_end``, both 1.x hooks). 1.x ran the epoch end first, then the ``on_*_epoch_end`` hook,
whatever either returned: the converted epoch end is kept as ``_<hook>_1x`` and the 2.x hook calls it first."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

CLOCKED = """import pytorch_lightning as pl
import torch
from torch import nn


class Clocked(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.events = []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def training_epoch_end(self, outputs):
        self.events.append(("training_epoch_end", len(outputs)))

    def on_train_epoch_end(self):
        \"\"\"Its own end.\"\"\"
        self.events.append("on_train_epoch_end")

    def validation_step(self, batch, batch_idx):
        return {"rows": len(batch[0])}

    def on_validation_epoch_end(self):
        pass

    def validation_epoch_end(self, outputs):
        if not outputs:
            return
        self.events.append(("validation_epoch_end", sum(o["rows"] for o in outputs)))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_the_epoch_end_runs_first_in_the_2x_hook(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(CLOCKED, no_todo=True, no_unmarked=True)
    assert '        """Its own end."""\n        self._training_epoch_end_1x()\n' in out, out
    assert "    def on_validation_epoch_end(self):\n        self._validation_epoch_end_1x()\n\n" in out, out
    assert "def _validation_epoch_end_1x(self):" in out and "def validation_epoch_end" not in out
    namespace: dict[str, object] = {}
    exec(compile(out, "clocked", "exec"), namespace)  # noqa: S102
    model = namespace["Clocked"]()
    loader = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2)
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(model, loader, loader)
    # 1.x: the validation epoch (inside the training epoch) and then the training epoch's end, each epoch end
    # before its on_*_epoch_end hook, with the outputs of its own steps.
    assert model.events == [("validation_epoch_end", 6), ("training_epoch_end", 3), "on_train_epoch_end"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("def on_validation_epoch_end(self):", "def on_validation_epoch_end(self, *args):"), "another signature"),
        (
            (
                "    def configure_optimizers",
                "    def _validation_epoch_end_1x(self):\n        pass\n\n    def configure_optimizers",
            ),
            "the private name is taken",
        ),
    ],
)
def test_what_cannot_run_first_keeps_the_todo(change: tuple[str, str], why: str) -> None:
    out = upgraded(CLOCKED.replace(*change))
    assert "TODO(lightning-mgpu:hook-conflict): validation_epoch_end became on_validation_epoch_end" in out, why
    assert "def validation_epoch_end(self, outputs):" in out
