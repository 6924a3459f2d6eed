"""1.9: a checkpoint written under strategy="dp" resumed with resume_from_checkpoint= (on the CPU 1.9 ran dp as ddp
on one process).

``--save PATH`` trains the first epoch and saves there (run under 1.x only); ``--resume PATH`` continues to
``--max_epochs``.
"""
import json
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 4))
        self.step_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return {"loss": nn.functional.cross_entropy(self.net(x), y)}

    def training_step_end(self, outputs):
        return {"loss": outputs["loss"].mean()}

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.step_losses.append(float(outputs["loss"]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 16, generator=g)
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "weights": weights}, f)


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--save")
    parser.add_argument("--resume")
    parser.add_argument("--max_epochs", type=int, default=3)
    args = parser.parse_args()
    pl.seed_everything(17)
    # replace_sampler_ddp=False: 1.x ran dp on the CPU as ddp, whose DistributedSampler would shuffle the data
    trainer = pl.Trainer(
        strategy="dp",
        accelerator="cpu",
        devices=1,
        max_epochs=1 if args.save else args.max_epochs,
        resume_from_checkpoint=args.resume,
        replace_sampler_ddp=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(Classifier())
    if args.save:
        trainer.save_checkpoint(args.save)
