"""1.9: a Trainer built from the command line (Trainer.add_argparse_args / from_argparse_args)."""
import json
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning import Trainer


class Regressor(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.step_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 8, generator=g)
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True).sin()), batch_size=12, shuffle=True)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


def main():
    parser = ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser = Trainer.add_argparse_args(parser)
    args = parser.parse_args()
    pl.seed_everything(7)
    trainer = Trainer.from_argparse_args(args, logger=False, enable_checkpointing=False)
    trainer.fit(Regressor(lr=args.lr))


if __name__ == "__main__":
    main()
