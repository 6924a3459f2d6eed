"""1.6: the Trainer's settings kept in a dict, filled in by condition, with 1.4-era names."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl

CONFIG = {"lr": 0.1, "batch_size": 16, "gpus": 0}


class Classifier(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        self.step_losses.append(loss.item())
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=CONFIG["batch_size"])

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


def main():
    pl.seed_everything(3)
    trainer_kwargs = dict(
        gpus=CONFIG["gpus"] or None,
        max_epochs=2,
        checkpoint_callback=False,
        weights_summary=None,
        progress_bar_refresh_rate=0,
        logger=False,
    )
    if CONFIG["gpus"] > 1:
        trainer_kwargs["accelerator"] = "ddp"
    trainer = pl.Trainer(**trainer_kwargs)
    trainer.fit(Classifier(CONFIG["lr"]))


if __name__ == "__main__":
    main()
