"""1.6: validation over two dataloaders, validation_epoch_end aggregating each loader's outputs (a list per loader)."""
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
        self.val_means = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx):
        x, y = batch
        return {"val_loss": nn.functional.cross_entropy(self.net(x), y)}

    def validation_epoch_end(self, outputs):
        means = [torch.stack([o["val_loss"] for o in loader]).mean().item() for loader in outputs]
        self.val_means.append(means)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def _data(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)

    def train_dataloader(self):
        return self._data(96, 0)

    def val_dataloader(self):
        return [self._data(32, 1), self._data(48, 2)]

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights, "val_means": self.val_means}, f)


if __name__ == "__main__":
    pl.seed_everything(12)
    trainer = pl.Trainer(gpus=None, max_epochs=2, logger=False, checkpoint_callback=False, weights_summary=None,
                         num_sanity_val_steps=0, progress_bar_refresh_rate=0)
    trainer.fit(Classifier())
