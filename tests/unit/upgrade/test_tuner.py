"""``lightning_mgpu.upgrade.tuner`` (rule ``tuner``): trainer.tuner.lr_find / scale_batch_size -> Tuner(trainer), with
1.x's ``update_attr=False``, where the result went kept."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.transform import upgrade_source

SCRIPT = """import pytorch_lightning as pl


def tune_and_fit(model, train_loader, val_loader):
    trainer = pl.Trainer(max_epochs=3)
    lr_finder = trainer.tuner.lr_find(model, train_dataloader=train_loader, val_dataloaders=val_loader)
    model.hparams.lr = lr_finder.suggestion()
    new_batch_size = trainer.tuner.scale_batch_size(model, mode="binsearch")
    trainer.fit(model, train_loader, val_loader)
"""


def upgraded(source: str) -> str:
    result = upgrade_source(source)
    assert upgrade_source(result.source).source == result.source, "a second run changed something"
    return result.source


def test_the_tuner_moves_out_of_the_trainer() -> None:
    out = upgraded(SCRIPT)
    lines = [line.strip() for line in out.splitlines()]
    assert "from pytorch_lightning.tuner import Tuner" in lines
    assert (
        "lr_finder = Tuner(trainer).lr_find(model, train_dataloaders=train_loader, val_dataloaders=val_loader,"
        " update_attr=False)" in lines
    )
    assert "model.hparams.lr = lr_finder.suggestion()" in lines  # where the result went stays
    assert 'new_batch_size = Tuner(trainer).scale_batch_size(model, mode="binsearch")' in lines
    assert unmarked(out) == []


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("self.trainer.lr_find(model)", "Tuner(self.trainer).lr_find(model, update_attr=False)"),
        ("trainer.tuner.lr_find(model, update_attr=True)", "Tuner(trainer).lr_find(model, update_attr=True)"),
        ("loader.tuner.lr_find(model)", "loader.tuner.lr_find(model)"),  # not a trainer
        ("trainer.tuner.lr_find(model, a, b, dm)", "trainer.tuner.lr_find(model, a, b, dm)"),  # 2.x's order differs
    ],
)
def test_tuner_calls(before: str, after: str) -> None:
    out = upgraded(f"import lightning.pytorch as pl\nx = {before}\n")
    assert out.endswith(f"x = {after}\n")
    assert ("from lightning.pytorch.tuner import Tuner\n" in out) == after.startswith("Tuner(")


def test_the_converted_call_runs_on_lightning_2(tmp_path) -> None:
    """The rewritten finder runs on this Lightning (a few steps on the CPU) and leaves the model's lr alone."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lr = 0.5
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    source = upgraded(
        "def find(trainer, model, loader):\n    return trainer.tuner.lr_find(model, loader, num_training=5)\n"
    )
    namespace: dict[str, object] = {}
    exec(compile("from pytorch_lightning.tuner import Tuner\n" + source, "converted", "exec"), namespace)  # noqa: S102
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False, default_root_dir=tmp_path
    )
    model = Model()
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
    finder = namespace["find"](trainer, model, loader)  # type: ignore[operator]
    assert finder is not None and model.lr == 0.5  # update_attr=False, as 1.x
