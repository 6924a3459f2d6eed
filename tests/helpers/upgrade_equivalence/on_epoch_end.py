"""1.6: an on_epoch_end hook that closes the epoch's record (the mean of the training losses it collected), with a
validation loop beside it."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []
        self.batch_losses = []
        self.epoch_means = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        self.batch_losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def on_epoch_end(self):
        self.epoch_means.append(sum(self.batch_losses) / max(len(self.batch_losses), 1))
        self.batch_losses = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def _data(self, n, seed, shuffle):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16, shuffle=shuffle)

    def train_dataloader(self):
        return self._data(96, 0, True)

    def val_dataloader(self):
        return self._data(32, 1, False)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "epoch_means": self.epoch_means, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(12)
    trainer = pl.Trainer(gpus=0, max_epochs=3, logger=False, checkpoint_callback=False, weights_summary=None,
                         progress_bar_refresh_rate=0)
    trainer.fit(Classifier())
