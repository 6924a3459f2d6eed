"""Two epochs on 2 ranks with validation after each, saving the final parameters:
``python -m tests.integration.runners.run_val_parity STRATEGY OUT.pt LIMIT_VAL_BATCHES [STRATEGY OUT.pt LIMIT ...]``.

Several runs (triples) go one after the other in the same processes, which saves a launch per run: under ``ddp`` and
``sharded`` the second rank re-runs this command line, so it walks the same runs."""

from __future__ import annotations

import sys

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_mgpu  # noqa: F401
from tests.helpers.trainer import quiet_trainer


class Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 2))

    def _data(self, n: int, seed: int) -> TensorDataset:
        x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
        return TensorDataset(x, (x[:, 0] > 0).long())

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(self._data(100, 0), batch_size=8, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self._data(40, 2), batch_size=8)


def main(strategy: str, out: str, limit_val_batches: int) -> None:
    pl.seed_everything(7, verbose=False)
    trainer = quiet_trainer(
        max_epochs=2, strategy=strategy, devices=2, num_sanity_val_steps=0, limit_val_batches=limit_val_batches
    )
    trainer.fit(Module())
    if trainer.is_global_zero:
        torch.save(trainer.lightning_module.state_dict(), out)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 3:
        raise SystemExit(__doc__)
    for i in range(0, len(args), 3):
        main(args[i], args[i + 1], int(args[i + 2]))
