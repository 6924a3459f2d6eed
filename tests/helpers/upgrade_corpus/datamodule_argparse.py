"""A 1.x DataModule and Trainer both built from argparse flags (the Lightning 1.2 MNIST template's shape)."""
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import pytorch_lightning as pl


class RandomDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, num_samples: int = 160):
        super().__init__()
        self.batch_size = batch_size
        self.num_samples = num_samples

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.num_samples, 6, generator=g)
        full = TensorDataset(x, (x.mean(1) > 0).long())
        self.train_set, self.val_set = random_split(full, [self.num_samples - 32, 32], generator=g)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(6, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("val_loss", loss, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def cli_main():
    parser = ArgumentParser()
    parser = pl.Trainer.add_argparse_args(parser)
    parser = RandomDataModule.add_argparse_args(parser)
    args = parser.parse_args()
    out = os.environ.get("CORPUS_OUT", "outputs")
    dm = RandomDataModule.from_argparse_args(args)
    trainer = pl.Trainer.from_argparse_args(args, default_root_dir=out, logger=False, checkpoint_callback=False)
    trainer.fit(Classifier(), datamodule=dm)
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")


if __name__ == "__main__":
    cli_main()
