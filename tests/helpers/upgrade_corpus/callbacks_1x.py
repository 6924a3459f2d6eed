"""1.x callbacks and a custom logger: the epoch, pretrain-routine and keyboard-interrupt hooks, a batch hook with
dataloader_idx, LightningLoggerBase, and the 1.x import paths (1.3-era code, trained with ddp on two CPU processes)."""
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.callbacks.base import Callback
from pytorch_lightning.loggers.base import LightningLoggerBase, rank_zero_experiment
from pytorch_lightning.utilities.distributed import rank_zero_only
from pytorch_lightning.utilities.seed import seed_everything


class CountingCallback(Callback):
    def __init__(self):
        self.epochs = 0
        self.batches = 0
        self.started = False

    def on_pretrain_routine_start(self, trainer, pl_module):
        self.started = True

    def on_epoch_start(self, trainer, pl_module):
        self.epochs += 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx):
        self.batches += 1

    def on_keyboard_interrupt(self, trainer, pl_module):
        print("interrupted: saving nothing")


class ListLogger(LightningLoggerBase):
    def __init__(self):
        super().__init__()
        self.rows = []

    @property
    def name(self):
        return "list"

    @property
    def version(self):
        return 0

    @property
    @rank_zero_experiment
    def experiment(self):
        return self.rows

    @rank_zero_only
    def log_hyperparams(self, params):
        pass

    @rank_zero_only
    def log_metrics(self, metrics, step):
        self.rows.append((step, dict(metrics)))


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.net(x).pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)


if __name__ == "__main__":
    seed_everything(7)
    out = os.environ.get("CORPUS_OUT", "outputs")
    counter = CountingCallback()
    trainer = pl.Trainer(
        accelerator="ddp_cpu",
        num_processes=2,
        max_epochs=2,
        limit_train_batches=3,
        callbacks=[counter],
        logger=ListLogger(),
        log_every_n_steps=1,
        progress_bar_refresh_rate=1,
        default_root_dir=out,
        checkpoint_callback=False,
    )
    trainer.fit(Model())
    assert counter.started and counter.batches == 6, (counter.started, counter.batches)
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")
