"""A 1.x fine-tuning script: a ModelCheckpoint passed as checkpoint_callback, resume_from_checkpoint from the command
line, the full weights summary, loaders reloaded every epoch, free GPUs picked for it (1.x: run twice, the second
time with --resume outputs/last.ckpt; on this machine: --gpus 0, two CPU processes)."""
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.callbacks import ModelCheckpoint, EarlyStopping


class FineTuner(LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.head(torch.relu(self.backbone(x))), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.head(torch.relu(self.backbone(x))), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(self.current_epoch)
        x = torch.randn(64, 8, generator=g)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)

    def val_dataloader(self):
        x = torch.randn(32, 8)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def main(args):
    out = os.environ.get("CORPUS_OUT", "outputs")
    checkpoint = ModelCheckpoint(dirpath=out, monitor="val_loss", save_last=True)
    trainer = Trainer(
        gpus=args.gpus,
        num_processes=2,
        accelerator="ddp_cpu" if args.gpus == 0 else "ddp",
        auto_select_gpus=True,
        checkpoint_callback=checkpoint,
        callbacks=[EarlyStopping(monitor="val_loss", patience=5)],
        resume_from_checkpoint=args.resume,
        reload_dataloaders_every_epoch=True,
        weights_summary="full",
        max_epochs=args.epochs,
        max_steps=None,
        limit_val_batches=2,
        default_root_dir=out,
        logger=False,
    )
    trainer.fit(FineTuner())
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--resume", type=str, default=None)
    main(parser.parse_args())
