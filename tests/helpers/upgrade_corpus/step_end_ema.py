"""A 1.x module whose training_step_end keeps an EMA of the weights: under ddp 1.x ran it after every step; 2.x never
calls it, so the tool keeps it as _training_step_end_1x, which LegacyStepEnds runs after every step."""
import copy

import torch
from torch import nn

import pytorch_lightning as pl


class EMAModel(pl.LightningModule):
    def __init__(self, decay=0.99):
        super().__init__()
        self.net = nn.Linear(4, 4)
        self.ema = copy.deepcopy(self.net).requires_grad_(False)
        self.decay = decay

    def training_step(self, batch, batch_idx):
        return {"loss": self.net(batch).pow(2).mean()}

    def training_step_end(self, outputs):
        with torch.no_grad():
            for p_ema, p in zip(self.ema.parameters(), self.net.parameters()):
                p_ema.mul_(self.decay).add_(p, alpha=1 - self.decay)
        return outputs

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def build_trainer(args):
    return pl.Trainer(gpus=args.gpus, accelerator="ddp", max_epochs=1)
