"""1.9: a LightningDataModule and a Trainer both built from the command line (add_argparse_args /
from_argparse_args), the model's own flags beside them."""
import json
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import pytorch_lightning as pl
from pytorch_lightning import LightningDataModule, Trainer


class SyntheticDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32, num_samples: int = 128, val_fraction: float = 0.25):
        super().__init__()
        self.batch_size = batch_size
        self.num_samples = num_samples
        self.val_fraction = val_fraction

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.num_samples, 16, generator=g)
        full = TensorDataset(x, x[:, :4].argmax(1))
        n_val = int(self.num_samples * self.val_fraction)
        self.train_set, self.val_set = random_split(
            full, [self.num_samples - n_val, n_val], generator=torch.Generator().manual_seed(1)
        )

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


class Classifier(pl.LightningModule):
    def __init__(self, hidden: int = 32, lr: float = 0.1, **kwargs):
        super().__init__()
        self.save_hyperparameters("hidden", "lr")
        self.net = nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 4))
        self.step_losses = []
        self.val_losses = []

    @staticmethod
    def add_model_specific_args(parent_parser):
        parser = parent_parser.add_argument_group("Classifier")
        parser.add_argument("--hidden", type=int, default=32)
        parser.add_argument("--lr", type=float, default=0.1)
        return parent_parser

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("val_loss", loss)
        if not self.trainer.sanity_checking:
            self.val_losses.append(loss.item())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "val_losses": self.val_losses, "weights": weights}, f)


if __name__ == "__main__":
    parser = ArgumentParser()
    parser = SyntheticDataModule.add_argparse_args(parser)
    parser = Classifier.add_model_specific_args(parser)
    parser = Trainer.add_argparse_args(parser)
    args = parser.parse_args()
    pl.seed_everything(19)
    dm = SyntheticDataModule.from_argparse_args(args)
    model = Classifier(**vars(args))
    trainer = Trainer.from_argparse_args(args, logger=False, enable_checkpointing=False, enable_model_summary=False,
                                         enable_progress_bar=False)
    trainer.fit(model, datamodule=dm)
