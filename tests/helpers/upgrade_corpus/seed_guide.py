"""The seed guide's snippets in one script: dp on 4 GPUs with native AMP, Neptune, FairScale activation checkpointing,
a set_to_none zero_grad, and a dp loss reduced in training_step_end. Converted, it needs no hand edit."""
import torch
from fairscale.nn import checkpoint_wrapper
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning import Trainer
from pytorch_lightning.loggers import NeptuneLogger


class LitModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.block = checkpoint_wrapper(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)))
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.block(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)  # loss inside the model: no GPU-0 gather of logits
        return {"loss": loss}

    def training_step_end(self, step_outputs):
        return {"loss": step_outputs["loss"].mean()}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer, optimizer_idx):
        optimizer.zero_grad(set_to_none=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        x = torch.randn(64, 32)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)

    def val_dataloader(self):
        return self.train_dataloader()


def build_trainer():
    neptune_logger = NeptuneLogger(project="workspace/project", mode="debug")
    return Trainer(
        gpus=4,
        accelerator="dp",
        precision=16,
        amp_backend="native",
        logger=neptune_logger,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
    )


if __name__ == "__main__":
    build_trainer().fit(LitModel())
