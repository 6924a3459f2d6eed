"""A GAN on DataParallel, as Lightning 1.x's GAN example trained it: two optimizers, optimizer_idx in training_step."""
import os
from argparse import ArgumentParser

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pytorch_lightning.core import LightningModule
from pytorch_lightning.trainer import Trainer


class GAN(LightningModule):
    def __init__(self, latent_dim=8, lr=2e-4):
        super().__init__()
        self.save_hyperparameters()
        self.generator = nn.Sequential(nn.Linear(latent_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 16), nn.Tanh())
        self.discriminator = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())

    def forward(self, z):
        return self.generator(z)

    def training_step(self, batch, batch_idx, optimizer_idx):
        (real,) = batch
        z = torch.randn(real.shape[0], self.hparams.latent_dim).type_as(real)
        if optimizer_idx == 0:  # generator
            valid = torch.ones(real.size(0), 1).type_as(real)
            return F.binary_cross_entropy(self.discriminator(self(z)), valid)
        fake = torch.zeros(real.size(0), 1).type_as(real)
        valid = torch.ones(real.size(0), 1).type_as(real)
        real_loss = F.binary_cross_entropy(self.discriminator(real), valid)
        fake_loss = F.binary_cross_entropy(self.discriminator(self(z).detach()), fake)
        return (real_loss + fake_loss) / 2

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr)
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.hparams.lr)
        return [opt_g, opt_d], []

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 16)), batch_size=16)


def build_trainer(args):
    # If you use distributed training, PyTorch recommends DistributedDataParallel; this example keeps dp.
    return Trainer(gpus=args.gpus, distributed_backend="dp", max_epochs=1, limit_train_batches=2, logger=False)


def main(args):
    trainer = build_trainer(args)
    trainer.fit(GAN())


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2)
    main(parser.parse_args())
