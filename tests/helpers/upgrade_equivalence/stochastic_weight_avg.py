"""1.6: Trainer(stochastic_weight_avg=True) with a step schedule: averaging starts at 80 % of the epochs, at the
learning rate the schedule has reached by then (1.x's swa_lrs=None)."""
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
        self.epoch_lrs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def on_train_epoch_end(self):
        self.epoch_lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.2)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)]

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)


if __name__ == "__main__":
    pl.seed_everything(21)
    model = Classifier()
    trainer = pl.Trainer(gpus=0, max_epochs=10, stochastic_weight_avg=True, logger=False, checkpoint_callback=False,
                         weights_summary=None, progress_bar_refresh_rate=0)
    trainer.fit(model)
    if os.environ.get("EQUIV_OUT"):
        weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()  # the averaged weights
        with open(os.environ["EQUIV_OUT"], "w") as f:
            json.dump({"losses": model.step_losses, "epoch_lrs": model.epoch_lrs, "weights": weights}, f)
