"""Lightning 1.6-1.9: ddp_sharded on GPUs, the strategy class imported explicitly, resumed from a checkpoint."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.strategies import DDPShardedStrategy


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(12, 12)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.net(x).pow(2).mean()

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu, using_native_amp, using_lbfgs):
        # warm up the learning rate over the first 10 steps
        if self.trainer.global_step < 10:
            for group in optimizer.param_groups:
                group["lr"] = 0.01 * (self.trainer.global_step + 1) / 10
        optimizer.step(closure=optimizer_closure)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 12)), batch_size=8)


def build_trainer(resume=None):
    return pl.Trainer(gpus=2, strategy=DDPShardedStrategy(), precision="bf16", resume_from_checkpoint=resume,
                      max_epochs=1, limit_train_batches=2, logger=False, enable_checkpointing=False)


def main(resume=None):
    trainer = build_trainer(resume)
    trainer.fit(Net())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
