"""Trainer settings kept in a dict, filled in by condition, and splatted into the Trainer (1.2-era project code)."""
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl

CONFIG = {"epochs": 1, "lr": 0.05, "use_amp": False, "workers": 2}


class Regressor(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 8, generator=g)
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)


def make_trainer(cfg, out):
    n_gpus = torch.cuda.device_count()
    trainer_kwargs = dict(
        gpus=n_gpus,
        max_epochs=cfg["epochs"],
        checkpoint_callback=False,
        weights_summary=None,
        progress_bar_refresh_rate=0,
        default_root_dir=out,
        logger=False,
        limit_train_batches=4,
    )
    if n_gpus > 1:
        trainer_kwargs["distributed_backend"] = "ddp"
    else:
        trainer_kwargs["num_processes"] = cfg["workers"]
        trainer_kwargs["accelerator"] = "ddp_cpu"
    if cfg["use_amp"]:
        trainer_kwargs["precision"] = 16
    return pl.Trainer(**trainer_kwargs)


if __name__ == "__main__":
    out = os.environ.get("CORPUS_OUT", "outputs")
    trainer = make_trainer(CONFIG, out)
    trainer.fit(Regressor(CONFIG["lr"]))
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")
