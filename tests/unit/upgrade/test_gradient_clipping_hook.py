"""Rule ``hook-param`` for ``configure_gradient_clipping``: 1.x called ``configure_gradient_clipping(optimizer,
optimizer_idx, gradient_clip_val=..., gradient_clip_algorithm=...)``; 2.x passes no index, and a 1.x override raises
TypeError at the first clipped step. The index goes; a body that reads it computes what 1.x passed. The converted
modules run under a real 2.x Trainer on CPU."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

CLIPPER = """import pytorch_lightning as pl
import torch
from torch import nn


class Clipper(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.clipped = []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean() * 1000

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.001)

    def configure_gradient_clipping(self, optimizer, optimizer_idx,
                                    gradient_clip_val, gradient_clip_algorithm):
        self.clipped.append((BODY, gradient_clip_val))
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
"""


def _fit(source: str):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict[str, object] = {}
    exec(compile(source, "<converted>", "exec"), namespace)  # noqa: S102
    model = namespace["Clipper"]()
    data = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)
    quiet_trainer("pytorch_lightning", max_epochs=1, gradient_clip_val=2.0).fit(model, data)
    return model


@pytest.mark.parametrize(("body", "seen"), [("'unused'", "unused"), ("optimizer_idx", 0)])
def test_the_index_goes_and_a_body_that_reads_it_computes_it(body: str, seen: object) -> None:
    out = upgraded(CLIPPER.replace("BODY", body))
    assert rules.TODO_TAG not in out and unmarked(out) == []
    assert "def configure_gradient_clipping(self, optimizer, gradient_clip_val, gradient_clip_algorithm):" in out
    computed = "        optimizer_idx = self.trainer.optimizers.index(optimizer)\n" in out
    assert computed == (body == "optimizer_idx")
    model = _fit(out)  # 1.x's override, unconverted, raises TypeError here
    assert model.clipped == [(seen, 2.0), (seen, 2.0)]


def test_the_unconverted_override_fails_under_2x() -> None:
    """What the rule is for: 2.x's Trainer calls the hook without the index."""
    with pytest.raises(TypeError, match="optimizer_idx"):
        _fit(CLIPPER.replace("BODY", "'unused'"))


def test_a_users_own_method_with_an_index_is_not_a_leftover() -> None:
    """The scan names an ``optimizer_idx`` parameter only on the methods Lightning called with one: a helper a
    manual-optimization step calls, or a method no release calls, is the user's own (two real files of the fourth
    held-out draw)."""
    source = (
        "import pytorch_lightning as pl\n"
        "class GAN(pl.LightningModule):\n"
        "    def inner_step(self, batch, batch_idx, optimizer_idx=0):\n"
        "        return optimizer_idx\n"
        "    def on_after_optimizer_step(self, trainer, pl_module, optimizer, optimizer_idx):\n"
        "        pass\n"
        "    def training_step(self, batch, batch_idx, optimizer_idx):\n"
        "        return optimizer_idx\n"
    )
    assert unmarked(source) == [(7, "def training_step(..., optimizer_idx)")]
