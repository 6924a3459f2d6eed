"""1.9: accumulate_grad_batches as a dict, {epoch: batches}: 1 in the first epoch, 3 from the second."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights,
                           "global_step": self.trainer.global_step}, f)


if __name__ == "__main__":
    pl.seed_everything(6)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=3, accumulate_grad_batches={0: 1, 1: 3}, logger=False,
                         enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(Classifier())
