"""1.9: a checkpoint written under strategy="ddp_sharded" (2 CPU processes) resumed with resume_from_checkpoint=.

``--save PATH`` trains the first epoch and saves there (run under 1.x only); ``--resume PATH`` continues to
``--max_epochs``.
"""
import json
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Regressor(pl.LightningModule):
    def __init__(self, lr=0.02):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.step_losses = []
        self.lrs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.step_losses.append(loss.item())
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return loss

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 8, generator=g)
        # no shuffle=True: 1.9.5 wrapped a RandomSampler in its DistributedSamplerWrapper, an order 2.x does not
        # give (ddp_spawn_cpu.py); the DistributedSampler it puts in shuffles the training data either way
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True).sin()), batch_size=8)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "lrs": self.lrs, "weights": weights}, f)


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--save")
    parser.add_argument("--resume")
    parser.add_argument("--max_epochs", type=int, default=3)
    args = parser.parse_args()
    pl.seed_everything(13)
    trainer = pl.Trainer(
        strategy="ddp_sharded",
        accelerator="cpu",
        devices=2,
        max_epochs=1 if args.save else args.max_epochs,
        resume_from_checkpoint=args.resume,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(Regressor())
    if args.save:
        trainer.save_checkpoint(args.save)
