"""Lightning 1.x's multi-node ddp2 demo: one process per node, the node's GPUs under DataParallel."""
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pytorch_lightning import LightningModule, Trainer, seed_everything


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return {"loss": nn.functional.cross_entropy(self.layer(x), y)}

    def training_step_end(self, outputs):
        loss = outputs["loss"].sum()
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def test_step_end(self, outputs):
        return torch.mean(outputs)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return {"val_loss": nn.functional.cross_entropy(self.layer(x), y)}

    def validation_epoch_end(self, outputs):
        self.log("val_loss", torch.stack([o["val_loss"] for o in outputs]).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        x = torch.randn(32, 4)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def build_trainer(hparams):
    return Trainer(gpus=hparams.gpus, num_nodes=hparams.nodes, accelerator="ddp2", max_epochs=1, limit_train_batches=2,
                   logger=False, checkpoint_callback=False)


def main(hparams):
    seed_everything(42)
    trainer = build_trainer(hparams)
    trainer.fit(Model())


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=1)
    main(parser.parse_args())
