"""1.6: reload_dataloaders_every_n_epochs=1 with a training set that grows with the epoch (the 1.4 spelling,
reload_dataloaders_every_epoch=True, is gone from 1.6.5: neither reference runs it)."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Curriculum(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []
        self.loader_sizes = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        # each epoch adds 32 samples drawn for that epoch
        n = 32 * (self.current_epoch + 1)
        g = torch.Generator().manual_seed(100 + self.current_epoch)
        x = torch.randn(n, 16, generator=g)
        self.loader_sizes.append(n)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16, shuffle=True)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "loader_sizes": self.loader_sizes, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(14)
    trainer = pl.Trainer(gpus=0, max_epochs=3, reload_dataloaders_every_n_epochs=1, logger=False,
                         checkpoint_callback=False, weights_summary=None, progress_bar_refresh_rate=0)
    trainer.fit(Curriculum())
