"""1.6: gradient_clip_val with gradient_clip_algorithm="value" while accumulating 3 batches per step."""
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
        loss = nn.functional.cross_entropy(self.net(x), y) * 5.0
        self.step_losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(160, 16, generator=g) * 3
        return DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=16, shuffle=True)

    def on_train_end(self):
        if self.trainer.is_global_zero and os.environ.get("EQUIV_OUT"):
            weights = torch.cat([p.detach().flatten() for p in self.parameters()]).tolist()
            with open(os.environ["EQUIV_OUT"], "w") as f:
                json.dump({"losses": self.step_losses, "global_step": self.trainer.global_step, "weights": weights}, f)


if __name__ == "__main__":
    pl.seed_everything(9)
    trainer = pl.Trainer(
        gpus=0,
        max_epochs=2,
        gradient_clip_val=0.05,
        gradient_clip_algorithm="value",
        accumulate_grad_batches=3,
        logger=False,
        checkpoint_callback=False,
        weights_summary=None,
        progress_bar_refresh_rate=0,
    )
    trainer.fit(Classifier())
