"""1.9: dp, with training_step_end and validation_step_end reducing what the replicas returned."""
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
        return {"loss": nn.functional.cross_entropy(self.net(x), y, reduction="none")}

    def training_step_end(self, outputs):
        return {"loss": outputs["loss"].mean()}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return {"val_loss": nn.functional.cross_entropy(self.net(x), y)}

    def validation_step_end(self, outputs):
        return {"val_loss": outputs["val_loss"].mean()}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def _data(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)

    def train_dataloader(self):
        return self._data(128, 0)

    def val_dataloader(self):
        return self._data(32, 1)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.step_losses.append(float(outputs["loss"]))

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(5)
    # replace_sampler_ddp=False: 1.x ran dp on the CPU as ddp, whose DistributedSampler would shuffle the data
    trainer = pl.Trainer(strategy="dp", accelerator="cpu", devices=1, max_epochs=2, logger=False,
                         enable_checkpointing=False, enable_model_summary=False, replace_sampler_ddp=False)
    trainer.fit(Classifier())
