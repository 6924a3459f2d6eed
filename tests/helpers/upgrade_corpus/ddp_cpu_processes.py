"""A Lightning 1.x classifier trained with ddp on CPU processes (1.x: accelerator="ddp_cpu", num_processes=N)."""
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning import Trainer


class Classifier(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)


def build_trainer(out):
    return Trainer(
        num_processes=2,  # two CPU processes
        accelerator="ddp_cpu",
        max_epochs=1,
        limit_train_batches=4,
        checkpoint_callback=False,
        weights_summary=None,
        replace_sampler_ddp=True,
        default_root_dir=out,
        logger=False,
    )


def main():
    out = os.environ.get("CORPUS_OUT", "outputs")
    trainer = build_trainer(out)
    trainer.fit(Classifier())
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")


if __name__ == "__main__":
    main()
