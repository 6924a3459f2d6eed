"""Rules ``epoch-end`` and ``epoch-end-optimizers`` beside a ``training_step`` that takes ``optimizer_idx``.

A step that takes the index without reading it, in a class that stays under automatic optimization (here the user
steps by hand when ``automatic_optimization`` is off), runs one optimizer: the index is dropped (``hook-param``) and
the epoch end converts, on the first run as on the second. A class converted to manual optimization runs several:
its epoch end keeps the ``epoch-end-optimizers`` TODO from the first run on (1.x nested those outputs per optimizer).
Both were found not idempotent on a real file of the sixth held-out sample."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from tests.helpers.upgrade_check import upgraded, upgraded_result

ONE_OPTIMIZER = """import pytorch_lightning as pl
import torch
from torch import nn


class Smoother(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 1)
        self.means = []

    def training_step(self, batch, batch_idx, optimizer_idx=0):
        loss = self.net(batch[0]).pow(2).mean()
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        return loss

    def training_epoch_end(self, outputs):
        self.means.append(torch.stack([o["loss"] for o in outputs]).mean().item())

    def configure_optimizers(self):
        if self.hparams.get("slow"):
            return torch.optim.SGD(self.parameters(), lr=0.01)
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""

TWO_OPTIMIZERS = """import pytorch_lightning as pl
import torch
from torch import nn


class Pair(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.left = nn.Linear(3, 1)
        self.right = nn.Linear(3, 1)

    def training_step(self, batch, batch_idx, optimizer_idx=0):
        return (self.left(batch[0]) - self.right(batch[0])).pow(2).mean()

    def training_epoch_end(self, outputs):
        self.log("spread", torch.stack([o["loss"] for o in outputs]).mean())

    def configure_optimizers(self):
        return [torch.optim.SGD(self.left.parameters(), lr=0.1), torch.optim.Adam(self.right.parameters())]
"""


def test_an_unread_optimizer_index_of_one_optimizer_leaves_the_epoch_end_converted() -> None:
    result = upgraded_result(ONE_OPTIMIZER, no_todo=True, no_unmarked=True)  # idempotent: checked by the helper
    out = result.source
    assert "optimizer_idx" not in out
    assert "def on_train_epoch_end(self):" in out
    assert "self.training_step_outputs.append(" in out
    assert {f.rule for f in result.findings} >= {"epoch-end", "hook-param"}


def test_a_step_made_manual_keeps_the_optimizers_todo_from_the_first_run() -> None:
    out = upgraded(TWO_OPTIMIZERS)  # a second run changes nothing (it used to add a second TODO)
    assert "automatic_optimization = False" in out
    assert out.count(f"{rules.TODO_TAG}") == 1
    assert "TODO(lightning-mgpu:epoch-end-optimizers)" in out
