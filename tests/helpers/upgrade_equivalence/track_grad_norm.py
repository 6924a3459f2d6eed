"""1.9: track_grad_norm=2 logs the gradients' 2-norm; the script reads back what was logged."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.step_losses = []
        self.norms = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.norms.append(float(self.trainer.callback_metrics["grad_2.0_norm_total"]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(80, 8, generator=g)
        return DataLoader(TensorDataset(x, x[:, :1] * 2), batch_size=10)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights, "grad_norms": self.norms}, f)


if __name__ == "__main__":
    pl.seed_everything(9)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, track_grad_norm=2, logger=False,
                         enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(Regressor())
