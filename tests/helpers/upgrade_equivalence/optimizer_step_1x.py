"""1.9: a learning-rate warm-up in an overridden optimizer_step with 1.x's full signature (optimizer_idx, on_tpu,
using_native_amp, using_lbfgs)."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self, lr=0.1, warmup_steps=6):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []
        self.lrs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)

    def optimizer_step(
        self,
        epoch,
        batch_idx,
        optimizer,
        optimizer_idx,
        optimizer_closure,
        on_tpu=False,
        using_native_amp=False,
        using_lbfgs=False,
    ):
        # linear warm-up over the first steps
        if self.trainer.global_step < self.hparams.warmup_steps:
            scale = float(self.trainer.global_step + 1) / self.hparams.warmup_steps
            for pg in optimizer.param_groups:
                pg["lr"] = scale * self.hparams.lr
        self.lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step(closure=optimizer_closure)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16, shuffle=True)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "lrs": self.lrs, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(3)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, enable_progress_bar=False)
    trainer.fit(Classifier())
