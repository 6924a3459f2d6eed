"""A 1.4-era script on 4 GPUs: DDPPlugin objects, the find_unused_parameters switch, and native AMP."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.plugins import DDPPlugin
from pytorch_lightning.callbacks import ModelCheckpoint, LearningRateMonitor


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1)]

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8)


def build_trainer(args):
    checkpoint = ModelCheckpoint(monitor="train_loss", save_top_k=2)
    return pl.Trainer(
        gpus=args.gpus,
        num_nodes=1,
        plugins=[DDPPlugin(find_unused_parameters=False)],
        precision=16,
        amp_backend="native",
        callbacks=[checkpoint, LearningRateMonitor()],
        max_epochs=1,
        progress_bar_refresh_rate=10,
        logger=False,
    )


if __name__ == "__main__":
    from argparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--gpus", type=int, default=4)
    build_trainer(parser.parse_args()).fit(Model())
