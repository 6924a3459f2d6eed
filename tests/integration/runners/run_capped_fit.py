"""Fit (and save) an MLP built in ``configure_model``, each rank in its own memory cgroup (``tests/helpers/cgroup.py``).

    python -m tests.integration.runners.run_capped_fit --out DIR --strategy sharded_fsdp2 --devices 2 --width 2048

``--strategy auto --devices 1``: the whole model and its Adam state in one process. ``sharded_fsdp2`` (ZeRO-3): built
on the meta device, each rank materialises and keeps only its shards. Rank 0 writes ``DIR/done.json`` at the end.
"""

from __future__ import annotations

from tests.helpers.cgroup import join_from_env

join_from_env()  # before torch: everything this process allocates counts against its rank's cap

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from lightning.pytorch import LightningModule  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import lightning_mgpu  # noqa: E402,F401  (registers sharded_fsdp2)
from lightning_mgpu.strategies import FSDP2Strategy  # noqa: E402
from tests.helpers.trainer import quiet_trainer  # noqa: E402


class WideMLP(LightningModule):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.width, self.layers = width, layers
        self.net: nn.Module | None = None

    def configure_model(self) -> None:
        if self.net is None:  # under sharded_fsdp2 this runs on the meta device: no memory until the shards
            self.net = nn.Sequential(*[nn.Linear(self.width, self.width, bias=False) for _ in range(self.layers)])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        assert self.net is not None
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-5)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(32, self.width)), batch_size=4)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--strategy", default="sharded_fsdp2", choices=("auto", "sharded_fsdp2"))
    p.add_argument("--devices", default=2, type=int)
    p.add_argument("--width", default=2048, type=int)
    p.add_argument("--layers", default=12, type=int)
    p.add_argument("--steps", default=3, type=int)
    p.add_argument("--save", default=True, action=argparse.BooleanOptionalAction, help="save a checkpoint after fit")
    args = p.parse_args(argv)
    # ZeRO-3: one block's parameters gathered at a time, the setting for a model that does not fit whole.
    strategy: Any = FSDP2Strategy(reshard_after_forward=True) if args.strategy == "sharded_fsdp2" else "auto"
    trainer = quiet_trainer(accelerator="cpu", strategy=strategy, devices=args.devices, max_steps=args.steps)
    model = WideMLP(args.width, args.layers)
    trainer.fit(model)
    if args.save:
        trainer.save_checkpoint(args.out / "final.ckpt")  # under sharded_fsdp2 a folder, each rank writing its shards
    if trainer.is_global_zero:
        done = {
            "global_step": trainer.global_step,
            "parameters": args.width * args.width * args.layers,
            "world_size": trainer.world_size,
        }
        (args.out / "done.json").write_text(json.dumps(done))


if __name__ == "__main__":
    main()
