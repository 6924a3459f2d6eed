"""A 1.x module in the 1.0-1.4 style: hparams assigned whole, pl.metrics, and the three epoch-end hooks aggregating
what their steps returned (1.x: python epoch_end_hooks.py, trained with ddp on two CPU processes)."""
import os
from argparse import Namespace

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.core.lightning import LightningModule


class Net(LightningModule):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        self.layer = nn.Linear(16, 4)
        self.val_acc = pl.metrics.Accuracy(num_classes=4)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        return loss

    def training_epoch_end(self, outputs):
        avg = torch.stack([out["loss"] for out in outputs]).mean()
        self.log("train_loss_epoch", avg)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_acc(logits.softmax(-1), y)
        return F.cross_entropy(logits, y)

    def validation_epoch_end(self, outputs):
        self.log("val_loss", torch.stack(outputs).mean(), sync_dist=True)
        self.log("val_acc", self.val_acc.compute())
        self.val_acc.reset()

    def test_step(self, batch, batch_idx):
        x, y = batch
        return {"test_loss": F.cross_entropy(self(x), y)}

    def test_epoch_end(self, outputs):
        self.log("test_loss", torch.stack([o["test_loss"] for o in outputs]).mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def _loader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)

    def train_dataloader(self):
        return self._loader()

    def val_dataloader(self):
        return self._loader()

    def test_dataloader(self):
        return self._loader()


if __name__ == "__main__":
    out = os.environ.get("CORPUS_OUT", "outputs")
    model = Net(Namespace(lr=0.05))
    trainer = pl.Trainer(
        num_processes=2,
        distributed_backend="ddp_cpu",
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=2,
        limit_test_batches=2,
        default_root_dir=out,
        logger=False,
        weights_summary=None,
    )
    trainer.fit(model)
    trainer.test(model)
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")
