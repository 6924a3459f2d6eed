"""1.6: accelerator="ddp_cpu" on 2 CPU processes (1.x ran it as ddp_spawn)."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning import Trainer


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16, shuffle=True)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(11)
    trainer = Trainer(
        accelerator="ddp_cpu",
        num_processes=2,
        max_epochs=1,
        checkpoint_callback=False,
        weights_summary=None,
        progress_bar_refresh_rate=0,
        replace_sampler_ddp=True,
        logger=False,
    )
    trainer.fit(Classifier())
