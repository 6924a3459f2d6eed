"""A 1.x script that picks its backend from the machine: ddp on several GPUs, CPU processes without one."""
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class AutoEncoder(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 4), nn.ReLU())
        self.decoder = nn.Linear(4, 16)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = nn.functional.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(128, 16)), batch_size=16)


def main():
    out = os.environ.get("CORPUS_OUT", "outputs")
    gpus = torch.cuda.device_count()
    backend = "ddp" if gpus > 1 else "ddp_cpu"
    trainer = pl.Trainer(
        gpus=gpus,
        num_processes=2,
        accelerator=backend,
        precision=16 if gpus else 32,
        max_epochs=1,
        limit_train_batches=4,
        default_root_dir=out,
        logger=False,
        checkpoint_callback=False,
    )
    trainer.fit(AutoEncoder())
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")


if __name__ == "__main__":
    main()
