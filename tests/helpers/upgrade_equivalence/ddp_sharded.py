"""1.9: strategy="ddp_sharded" (FairScale OSS + ShardedDataParallel) on 2 CPU processes (the launcher re-runs
this file)."""
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
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 16, generator=g)
        # no shuffle=True: 1.9.5 wrapped a RandomSampler in its DistributedSamplerWrapper, an order 2.x does not
        # give (ddp_spawn_cpu.py); the DistributedSampler it puts in shuffles the training data either way
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(21)
    trainer = pl.Trainer(
        strategy="ddp_sharded",
        accelerator="cpu",
        devices=2,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(Classifier())
