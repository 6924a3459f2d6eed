"""Train 2 epochs under 2-rank ddp from a PreprocessedDataModule; record the indices each rank sees.

``python -m tests.integration.runners.run_data_ddp OUT`` writes ``OUT/seen_rank{r}.json``:
``{"epochs": {epoch: [indices]}, "readonly_warnings": [...], "world_size": 2}``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from lightning_mgpu.data import PreprocessedDataModule
from tests.helpers.data import Features, IndexedDataset
from tests.helpers.trainer import quiet_trainer

N = 64


class InPlaceAugment:
    """Writes into the sample in place: only safe because augment gets a private copy."""

    def __call__(self, sample: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        sample["feat"].mul_(1.0)
        return sample


class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(15, 10)
        self.seen: dict[int, list[int]] = {}

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(batch["index"].tolist())
        return F.cross_entropy(self.lin(batch["feat"].flatten(1)), batch["y"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: Path) -> None:
    dm = PreprocessedDataModule(
        IndexedDataset(N),
        out / "cache",
        Features(),
        backend="serial",
        batch_size=8,
        num_workers=1,
        augment=InPlaceAugment(),
        progress=False,
    )
    model = Recorder()
    trainer = quiet_trainer(strategy="ddp", devices=2, max_epochs=2)
    trainer.fit(model, dm)
    # Samples were read in the DataLoader worker, so this is this process's first read of the map.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.datasets["train"].augment = None
        dm.datasets["train"][0]
    result = {
        "epochs": model.seen,
        "readonly_warnings": [str(w.message) for w in caught if "writable" in str(w.message)],
        "world_size": trainer.world_size,
    }
    (out / f"seen_rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
