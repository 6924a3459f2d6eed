"""1.9: a GAN, two optimizers stepped in turn through optimizer_idx (automatic optimization)."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class GAN(pl.LightningModule):
    def __init__(self, latent=4):
        super().__init__()
        self.save_hyperparameters()
        self.generator = nn.Sequential(nn.Linear(latent, 16), nn.ReLU(), nn.Linear(16, 8))
        self.discriminator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.step_losses = []

    def training_step(self, batch, batch_idx, optimizer_idx):
        (real,) = batch
        z = torch.randn(real.shape[0], self.hparams.latent, generator=torch.Generator().manual_seed(batch_idx))
        fake = self.generator(z)
        bce = nn.functional.binary_cross_entropy_with_logits
        if optimizer_idx == 0:
            loss = bce(self.discriminator(fake), torch.ones(real.shape[0], 1))
        else:
            loss = bce(self.discriminator(real), torch.ones(real.shape[0], 1)) + bce(
                self.discriminator(fake.detach()), torch.zeros(real.shape[0], 1)
            )
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        g = torch.optim.Adam(self.generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        return [g, d], []

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(64, 8, generator=g) * 0.5 + 1), batch_size=16)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(1)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                         gradient_clip_val=1.0, enable_model_summary=False)
    trainer.fit(GAN())
