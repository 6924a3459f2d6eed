"""Lightning 1.5: FairScale's sharded training as a plugin instance, on CPU processes."""
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.plugins import DDPShardedPlugin


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))

    def training_step(self, batch, batch_idx, optimizer_idx=0):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer, optimizer_idx):
        optimizer.zero_grad(set_to_none=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        x = torch.randn(128, 8, generator=torch.Generator().manual_seed(1))
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)


def build_trainer(out):
    return pl.Trainer(num_processes=2, accelerator="ddp_cpu", plugins=[DDPShardedPlugin()],  # ZeRO-2 on CPU
                      max_epochs=1, limit_train_batches=4, default_root_dir=out, logger=False,
                      checkpoint_callback=False)


if __name__ == "__main__":
    out = os.environ.get("CORPUS_OUT", "outputs")
    trainer = build_trainer(out)
    trainer.fit(Regressor())
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")
