"""1.6: terminate_on_nan=True with a loss that turns non-finite at a known step; where the training stopped."""
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

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.current_epoch == 1 and batch_idx == 3:
            loss = loss * float("nan")  # a numerically unstable batch
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16, shuffle=True)


if __name__ == "__main__":
    pl.seed_everything(15)
    model = Classifier()
    trainer = pl.Trainer(gpus=0, max_epochs=3, terminate_on_nan=True, logger=False, checkpoint_callback=False,
                         weights_summary=None, progress_bar_refresh_rate=0)
    stopped = ""
    try:
        trainer.fit(model)
    except ValueError as err:
        stopped = str(err).split(".")[0]
    if os.environ.get("EQUIV_OUT"):
        weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
        finite = [loss for loss in model.step_losses if loss == loss]
        with open(os.environ["EQUIV_OUT"], "w") as f:
            json.dump({"losses": finite, "steps_run": len(model.step_losses), "stopped": [float(bool(stopped))],
                       "weights": weights}, f)
