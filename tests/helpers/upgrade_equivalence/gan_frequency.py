"""1.6: a GAN whose optimizers take turns by "frequency" (the discriminator twice, then the generator once)."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class GAN(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        self.discriminator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.step_losses = []

    def training_step(self, batch, batch_idx, optimizer_idx):
        (real,) = batch
        z = torch.randn(real.shape[0], 4, generator=torch.Generator().manual_seed(batch_idx))
        bce = nn.functional.binary_cross_entropy_with_logits
        if optimizer_idx == 0:
            fake = self.generator(z).detach()
            loss = bce(self.discriminator(real), torch.ones(len(real), 1)) + bce(
                self.discriminator(fake), torch.zeros(len(real), 1)
            )
        else:
            loss = bce(self.discriminator(self.generator(z)), torch.ones(len(real), 1))
        self.step_losses.append(loss.item())
        return {"loss": loss}

    def configure_optimizers(self):
        d = torch.optim.SGD(self.discriminator.parameters(), lr=0.05)
        g = torch.optim.SGD(self.generator.parameters(), lr=0.05)
        return [{"optimizer": d, "frequency": 2}, {"optimizer": g, "frequency": 1}]

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(96, 8, generator=g) * 0.5 + 1), batch_size=16)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(4)
    trainer = pl.Trainer(gpus=0, max_epochs=2, logger=False, checkpoint_callback=False, weights_summary=None,
                         progress_bar_refresh_rate=0)
    trainer.fit(GAN())
