"""A Lightning 1.0 project script: distributed_backend and gpus from the command line, loaders passed to fit and
test by their 1.x keyword names (1.x: python lightning_1_0.py --distributed_backend dp --gpus 0)."""
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class MLP(pl.LightningModule):
    def __init__(self, hparams):
        super(MLP, self).__init__()
        self.hparams = hparams
        self.model = nn.Sequential(nn.Linear(10, hparams.hidden), nn.ReLU(), nn.Linear(hparams.hidden, 2))

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main(hparams):
    out = os.environ.get("CORPUS_OUT", "outputs")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 10, generator=g)
    data = TensorDataset(x, (x.sum(1) > 0).long())
    model = MLP(hparams)
    trainer = pl.Trainer(
        gpus=hparams.gpus,
        distributed_backend=hparams.distributed_backend,
        max_epochs=hparams.epochs,
        default_root_dir=out,
        logger=False,
        checkpoint_callback=False,
        weights_summary="top",
    )
    trainer.fit(model, train_dataloader=DataLoader(data, batch_size=16))
    trainer.test(model, test_dataloaders=DataLoader(data, batch_size=32))
    with open(os.path.join(out, "done.txt"), "w") as f:
        f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--distributed_backend", type=str, default="dp", choices=["dp", "ddp", "ddp2"])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    main(parser.parse_args())
