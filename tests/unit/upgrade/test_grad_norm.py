"""``lightning_mgpu.upgrade.grad_norm`` (rule ``track-grad-norm``): Trainer(track_grad_norm=p) -> the LightningModule's
on_before_optimizer_step logging grad_norm(self, norm_type=p), where the file shows the one module it belongs to."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

SCRIPT = """import pytorch_lightning as pl
import torch


class LitModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def build():
    return pl.Trainer(track_grad_norm=2, max_epochs=1)
"""


def test_the_module_logs_the_norm_the_trainer_named() -> None:
    out = upgraded(SCRIPT)
    assert "from pytorch_lightning.utilities import grad_norm" in out
    assert (
        "    def on_before_optimizer_step(self, optimizer):\n"
        "        # Trainer(track_grad_norm=2) in 1.x: the gradients' norms, logged before each optimizer step\n"
        "        self.log_dict(grad_norm(self, norm_type=2))\n" in out
    )
    assert "return pl.Trainer(max_epochs=1)" in out and "TODO" not in out


@pytest.mark.parametrize(
    "source",
    [
        SCRIPT.replace("track_grad_norm=2", "track_grad_norm=args.norm"),  # a value the file does not show
        SCRIPT + "\n\nclass Other(pl.LightningModule):\n    pass\n",  # two modules: which one?
        SCRIPT.replace(
            "    def configure_optimizers",
            "    def on_before_optimizer_step(self, o):\n        pass\n\n    def configure_optimizers",
        ),  # the hook is there already
    ],
)
def test_where_the_file_does_not_say_the_todo_stays(source: str) -> None:
    out = upgraded(source)
    assert "trainer-track-grad-norm): track_grad_norm is gone" in out and "grad_norm(self, norm_type" not in out


def test_the_hook_logs_on_lightning_2(tmp_path) -> None:
    """The converted script trains on this Lightning and logs the 2-norms (grad_2.0_norm_total among them)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict[str, object] = {}
    exec(compile(upgraded(SCRIPT), "converted", "exec"), namespace)  # noqa: S102
    model = namespace["LitModel"]()  # type: ignore[operator]
    # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_steps=2, default_root_dir=tmp_path)
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=8))
    assert "grad_2.0_norm_total" in trainer.callback_metrics
