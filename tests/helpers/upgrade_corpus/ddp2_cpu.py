"""Lightning 1.x ddp2: one process per node drives the node's devices with DataParallel."""
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(6, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.layer(x), y)
        return {"loss": loss}

    def training_step_end(self, outputs):
        # ddp2/dp: each device returned its loss; average them
        outputs["loss"] = outputs["loss"].mean()
        return outputs

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        x = torch.randn(96, 6, generator=torch.Generator().manual_seed(3))
        return DataLoader(TensorDataset(x, x[:, :3].argmax(1)), batch_size=12)


def build_trainer(out):
    trainer = pl.Trainer(
        distributed_backend="ddp2",
        num_processes=2,
        max_epochs=1,
        limit_train_batches=3,
        default_root_dir=out,
        logger=False,
        checkpoint_callback=False,
    )
    return trainer


if __name__ == "__main__":
    out = os.environ.get("CORPUS_OUT", "outputs")
    trainer = build_trainer(out)
    trainer.fit(Model())
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")
