"""A 1.5-era DeepSpeed ZeRO-2 script: the plugin object, its spawn twin, and apex-free fp16."""
import torch
from torch import nn

from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.plugins import DeepSpeedPlugin, DDPSpawnPlugin


class Big(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])

    def training_step(self, batch, batch_idx):
        return self.net(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def build_trainer(args):
    if args.deepspeed:
        plugin = DeepSpeedPlugin(stage=2, offload_optimizer=False, allgather_bucket_size=5e8)
    else:
        plugin = DDPSpawnPlugin(find_unused_parameters=False)
    return Trainer(gpus=args.gpus, plugins=plugin, precision=16, max_epochs=args.epochs, log_every_n_steps=10)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--deepspeed", action="store_true")
    build_trainer(parser.parse_args()).fit(Big())
