"""``multiple_trainloader_mode="max_size_cycle"`` (1.x's default) is dropped: 2.x's fit loop combines a collection of
training loaders that way itself. Any other value keeps the ``trainer-multiple-trainloader-mode`` TODO, and the
run-time translation takes the default and refuses the rest."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs
from tests.helpers.upgrade_check import upgraded

TODO = "TODO(lightning-mgpu:trainer-multiple-trainloader-mode)"

PAIRED_LOADERS = """import pytorch_lightning as pl


def fit_pair(net, frames, styles, epochs):
    runner = pl.Trainer(
        max_epochs=epochs,
        multiple_trainloader_mode={mode},
        benchmark=True,
    )
    runner.fit(net)
"""


def test_the_default_mode_is_dropped() -> None:
    out = upgraded(PAIRED_LOADERS.format(mode='"max_size_cycle"'), no_todo=True, no_unmarked=True)
    assert "multiple_trainloader_mode" not in out
    assert "pl.Trainer(\n        max_epochs=epochs,\n        benchmark=True,\n    )" in out, out


@pytest.mark.parametrize("mode", ['"min_size"', "cfg.mode"])
def test_another_mode_keeps_the_todo(mode: str) -> None:
    out = upgraded(PAIRED_LOADERS.format(mode=mode), no_unmarked=True)
    assert TODO in out and "multiple_trainloader_mode=" not in out.replace(TODO, "").split("runner = ")[1]


def test_the_translation_takes_the_default_and_refuses_min_size() -> None:
    assert legacy_trainer_kwargs({"multiple_trainloader_mode": "max_size_cycle", "max_epochs": 2}) == {"max_epochs": 2}
    with pytest.raises(ValueError, match="CombinedLoader"):
        legacy_trainer_kwargs({"multiple_trainloader_mode": "min_size"})


def test_2x_combines_training_loaders_as_1x_max_size_cycle(tmp_path) -> None:  # noqa: ANN001
    """A dict of two training loaders (4 and 2 batches), fitted by 2.x's Trainer without the argument: 4 steps, the
    shorter loader restarting, as 1.x's CombinedLoader in max_size_cycle mode (its CycleIterator) gave them."""
    torch = pytest.importorskip("torch")
    from lightning.pytorch import LightningModule, Trainer
    from torch.utils.data import DataLoader

    seen: list[tuple[int, int]] = []

    class Pair(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def train_dataloader(self):  # noqa: ANN202
            return {"a": DataLoader(list(range(4)), batch_size=1), "b": DataLoader([10, 11], batch_size=1)}

        def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN202
            seen.append((int(batch["a"]), int(batch["b"])))
            return (self.weight * 0).sum()

        def configure_optimizers(self):  # noqa: ANN202
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Pair())
    assert seen == [(0, 10), (1, 11), (2, 10), (3, 11)]
