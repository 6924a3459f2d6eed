"""A 1.x research script: the Trainer's flags come from argparse (Trainer.add_argparse_args / from_argparse_args), the
model adds its own, and the epoch ends aggregate what the steps returned.

1.x command line: python argparse_trainer.py --gpus 0 --num_processes 2 --accelerator ddp_cpu --max_epochs 1
"""
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning import Trainer, seed_everything


class LitClassifier(pl.LightningModule):
    def __init__(self, hidden_dim=32, learning_rate=0.05, **kwargs):
        super().__init__()
        self.save_hyperparameters()
        self.l1 = nn.Linear(16, self.hparams.hidden_dim)
        self.l2 = nn.Linear(self.hparams.hidden_dim, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        return {"val_loss": F.cross_entropy(y_hat, y), "correct": (y_hat.argmax(1) == y).float().sum(), "n": len(y)}

    def validation_epoch_end(self, outputs):
        avg_loss = torch.stack([x["val_loss"] for x in outputs]).mean()
        acc = sum(x["correct"] for x in outputs) / sum(x["n"] for x in outputs)
        self.log("val_loss", avg_loss, sync_dist=True)
        self.log("val_acc", acc, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)

    @staticmethod
    def add_model_specific_args(parent_parser):
        parser = ArgumentParser(parents=[parent_parser], add_help=False)
        parser.add_argument("--hidden_dim", type=int, default=32)
        parser.add_argument("--learning_rate", type=float, default=0.05)
        return parser


def loaders(batch_size):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    data = TensorDataset(x, x[:, :4].argmax(1))
    return DataLoader(data, batch_size=batch_size), DataLoader(data, batch_size=batch_size)


def cli_main():
    seed_everything(1234)
    parser = ArgumentParser()
    parser.add_argument("--batch_size", default=32, type=int)
    parser = Trainer.add_argparse_args(parser)
    parser = LitClassifier.add_model_specific_args(parser)
    parser.set_defaults(replace_sampler_ddp=True, limit_train_batches=4, limit_val_batches=2)
    args = parser.parse_args()

    out = os.environ.get("CORPUS_OUT", "outputs")
    train, val = loaders(args.batch_size)
    model = LitClassifier(**vars(args))
    trainer = Trainer.from_argparse_args(args, default_root_dir=out, logger=False, checkpoint_callback=False)
    trainer.fit(model, train_dataloader=train, val_dataloaders=val)
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")


if __name__ == "__main__":
    cli_main()
