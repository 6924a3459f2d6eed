"""Train a tiny model on 2 CPU processes with ``NeptuneLogger(mode="offline")``.

Run by ``tests/integration/loggers/test_neptune.py`` as ``python -m tests.integration.runners.run_neptune_ddp --strategy
ddp|ddp_spawn --out DIR`` with ``NEPTUNE_DATA_DIRECTORY`` set. The logger is built in the launching process before the
launch (ddp re-runs this script for rank 1; ddp_spawn pickles the logger to both workers).

Every rank writes ``pid_rank{r}.json`` so the test can tell which process wrote the run. The model
mimics the GPU monitor: it gathers each rank's own value to every rank and logs one key per rank
(``time/rank{r}/data_wait_pct`` = 10 + r), so the run must hold rank 1's value under
``monitoring/rank1/...`` although only rank 0 writes.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.loggers import NeptuneLogger
from tests.helpers.trainer import quiet_trainer

STEPS = 6
BATCH = 4


class TinyModel(LightningModule):
    def __init__(self, out: str, hidden: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def on_fit_start(self) -> None:
        Path(self.hparams.out, f"pid_rank{self.global_rank}.json").write_text(json.dumps({"pid": os.getpid()}))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        # What the GPU monitor does: every rank's own number reaches the logger on rank 0.
        mine = torch.tensor([10.0 + self.global_rank])
        per_rank = self.all_gather(mine).reshape(-1)
        for rank, value in enumerate(per_rank.tolist()):
            self.log(f"time/rank{rank}/data_wait_pct", value, rank_zero_only=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def _loader(self, n: int) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, 4, generator=g)
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=BATCH)

    def train_dataloader(self) -> DataLoader:
        return self._loader(STEPS * BATCH * 2)  # 2 ranks x STEPS batches: one epoch is STEPS steps

    def val_dataloader(self) -> DataLoader:
        return self._loader(4 * BATCH)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=("ddp", "ddp_spawn"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logger = NeptuneLogger(mode="offline", project=None, name=f"tiny-{args.strategy}", tags=["test"])
    trainer = quiet_trainer(  # with CleanExit
        strategy=args.strategy,
        devices=2,
        max_epochs=1,
        logger=logger,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath=args.out / "ckpt", monitor="val_loss", save_last=True)],
    )
    trainer.fit(TinyModel(str(args.out)))


if __name__ == "__main__":
    main()
