"""Lightning 1.x with Horovod: accelerator="horovod" (run under horovodrun, or with num_processes on CPU)."""
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pytorch_lightning import LightningModule, Trainer


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(10, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.layer(x), y)

    def backward(self, loss, optimizer, optimizer_idx, *args, **kwargs):
        loss.backward(*args, **kwargs)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        x = torch.randn(64, 10, generator=torch.Generator().manual_seed(2))
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def build_trainer(out):
    return Trainer(accelerator="horovod", num_processes=2, max_epochs=1, limit_train_batches=3,
                   default_root_dir=out, logger=False, checkpoint_callback=False)


if __name__ == "__main__":
    out = os.environ.get("CORPUS_OUT", "outputs")
    trainer = build_trainer(out)
    trainer.fit(Model())
    if trainer.is_global_zero:
        with open(os.path.join(out, "done.txt"), "w") as f:
            f.write(f"{type(trainer.strategy).__name__} {trainer.world_size} {trainer.global_step} {trainer.precision}\n")
