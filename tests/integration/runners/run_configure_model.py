"""A model built in ``configure_model``, fit under ``sharded_fsdp2`` on CPU ranks (gloo), saved as a sharded folder.

Run as ``python -m tests.integration.runners.run_configure_model --out DIR --devices 2 [--resume CKPT]``. Each rank
writes ``DIR/result_rank{r}.json``: the devices ``configure_model`` saw its parameters on, their type after ``fit``,
whether they are finite, the losses, and (when resuming) the sum of every whole parameter at the first batch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_mgpu  # noqa: F401  (registers sharded_fsdp2)
from tests.helpers.trainer import quiet_trainer

WIDTH = 64


class BuiltInConfigureModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net: nn.Module | None = None
        self.seen: list[str] = []
        self.losses: list[float] = []
        self.first_sum: float | None = None

    def configure_model(self) -> None:
        if self.net is not None:
            return
        self.net = nn.Sequential(
            nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 4)
        )
        self.seen = sorted({p.device.type for p in self.net.parameters()})

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.first_sum is None:  # the whole parameters as loaded (a collective per DTensor)
            self.first_sum = float(
                sum(
                    p.full_tensor().double().sum() if hasattr(p, "full_tensor") else p.double().sum()
                    for p in self.parameters()
                )
            )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        assert self.net is not None
        loss = F.cross_entropy(self.net(x), y)
        self.losses.append(float(loss))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, WIDTH, generator=g)
        return DataLoader(TensorDataset(x, (x[:, :4].argmax(dim=1))), batch_size=16)  # a learnable rule


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--devices", default=2, type=int)
    p.add_argument("--steps", default=12, type=int)
    p.add_argument("--resume", default=None)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = BuiltInConfigureModel()
    trainer = quiet_trainer(
        accelerator="cpu",
        strategy="sharded_fsdp2",
        devices=args.devices,
        max_steps=args.steps,
        use_distributed_sampler=True,
    )
    trainer.fit(model, ckpt_path=args.resume)
    trainer.save_checkpoint(args.out / "final.ckpt")
    params = list(model.parameters())
    result = {
        "seen": model.seen,
        "types": sorted({type(p).__name__ for p in params}),
        "finite": all(bool(torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all()) for p in params),
        "losses": model.losses,
        "first_sum": model.first_sum,
        "global_step": trainer.global_step,
    }
    (args.out / f"result_rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
