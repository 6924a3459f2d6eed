"""1.9: epoch ends that aggregate the steps' outputs, one calling super(), and a per-epoch figure they compute."""
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Base(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.epoch_means = []

    def training_epoch_end(self, outputs):
        self.epoch_means.append(torch.stack([o["loss"] for o in outputs]).mean().item())


class Classifier(Base):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.step_losses = []
        self.val_means = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.step_losses.append(loss.item())
        return {"loss": loss, "n": len(y)}

    def training_epoch_end(self, outputs):
        super().training_epoch_end(outputs)
        self.log("epoch_n", float(sum(o["n"] for o in outputs)))

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_epoch_end(self, outputs):
        mean = torch.stack(outputs).mean()
        self.val_means.append(mean.item())
        self.log("val_loss", mean)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def _data(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)

    def train_dataloader(self):
        return self._data(96, 0)

    def val_dataloader(self):
        return self._data(48, 1)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights,
                           "epoch_means": self.epoch_means, "val_means": self.val_means}, f)


if __name__ == "__main__":
    pl.seed_everything(2)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                         num_sanity_val_steps=0, enable_model_summary=False)
    trainer.fit(Classifier())
