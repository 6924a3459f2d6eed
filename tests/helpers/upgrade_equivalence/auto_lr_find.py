"""1.9: Trainer(auto_lr_find=True) and trainer.tune(model): the learning-rate finder sets the model's lr, then fit."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(320, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16, shuffle=True)

    def on_fit_start(self):
        self.step_losses = []  # the finder's own steps are not the training's

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"lr_found": self.lr, "losses": self.step_losses, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(6)
    model = Classifier()
    trainer = pl.Trainer(auto_lr_find=True, accelerator="cpu", devices=1, max_epochs=2, logger=False,
                         enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False)
    trainer.tune(model)
    trainer.fit(model)
