"""Where ``training_step(..., optimizer_idx)`` is not converted to manual optimization, the ``optimizer-idx`` TODO
says why (``manual_optimization.refusal``): what the tool could not see or do, so the person knows what is left."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.upgrade_check import upgraded

STEP = """    def training_step(self, batch, batch_idx, optimizer_idx):
        return self.heads[optimizer_idx](batch).sum()
"""

PLATEAU = f"""import pytorch_lightning as pl
import torch


class TwoHeads(pl.LightningModule):
{STEP}
    def configure_optimizers(self):
        first = torch.optim.SGD(self.heads[0].parameters(), lr=0.1)
        second = torch.optim.SGD(self.heads[1].parameters(), lr=0.1)
        slow = torch.optim.lr_scheduler.ReduceLROnPlateau(first)
        return [first, second], [{{"scheduler": slow, "monitor": "val_loss"}}]
"""

ELSEWHERE = f"""import pytorch_lightning as pl


class HeadsBase(pl.LightningModule):
{STEP}"""

TURNS_FROM_CONFIG = f"""import pytorch_lightning as pl
import torch


class Turns(pl.LightningModule):
{STEP}
    def configure_optimizers(self):
        setups = [{{"optimizer": torch.optim.SGD(h.parameters(), lr=0.1)}} for h in self.heads]
        for setup in setups:
            setup.update({{"frequency": self.turns}})
        return setups

    def describe(self):
        return repr(self.configure_optimizers())
"""

ACCUMULATING = f"""import pytorch_lightning as pl
import torch


class Pair(pl.LightningModule):
{STEP}
    def configure_optimizers(self):
        return [torch.optim.SGD(h.parameters(), lr=0.1) for h in self.heads]


trainer = pl.Trainer(accumulate_grad_batches=4)
"""


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (PLATEAU, "(not converted: ReduceLROnPlateau or a monitor: 2.x steps no scheduler under manual"),
        (ELSEWHERE, "(not converted: configure_optimizers is not in this class: how many optimizers 1.x"),
        (TURNS_FROM_CONFIG, "(not converted: the optimizers' 'frequency' values are read at run time, and the"),
        (ACCUMULATING, "(not converted: the file's Trainers accumulate gradients (2.x refuses it under manual"),
    ],
)
def test_the_todo_says_why_the_class_was_not_converted(source: str, why: str) -> None:
    out = upgraded(source, no_unmarked=True)
    todo = "# TODO(lightning-mgpu:optimizer-idx): training_step uses optimizer_idx: use manual optimization\n"
    assert f"{todo}    #   {why}" in out, out
    assert "automatic_optimization = False" not in out


def test_a_step_of_one_optimizer_has_no_reason_to_give() -> None:
    import libcst as cst

    from lightning_mgpu.upgrade.manual_optimization import plan

    source = (
        "import pytorch_lightning as pl\nclass One(pl.LightningModule):\n"
        "    def training_step(self, b, i):\n        return b\n"
    )
    assert plan(cst.parse_module(source)).refused == ()
