"""The digits data: 1797 8x8 images of handwritten digits, shipped with the package (no download).

``digits.csv.gz`` is scikit-learn's copy of the test set of the UCI ML hand-written digits data (E. Alpaydin and
C. Kaynak, 1998; CC BY 4.0): one image per row, 64 pixel values 0-16 then the label. It is read here with numpy,
as ``sklearn.datasets.load_digits`` reads it, to the same arrays. Shipping the file spares the demos scikit-learn and
its SciPy: with SciPy installed, every ``import lightning`` imports ``scipy.signal`` (through torchmetrics), 1.3 s
of each training process's start on a 2-core machine.
"""

from __future__ import annotations

import gzip
import hashlib
import io
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.data.loader import resumable_loader

DIGITS_FILE = Path(__file__).with_name("digits.csv.gz")
#: scikit-learn 1.9.1's ``sklearn/datasets/data/digits.csv.gz``, byte for byte.
DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 digits as ``(N, 1, 8, 8)`` float32 images in [0, 1] and int64 labels.

    Raises:
        RuntimeError: the packaged data file is missing or altered (a broken installation).
    """
    try:
        data = DIGITS_FILE.read_bytes()
    except OSError as err:
        raise RuntimeError(f"the digits data file {DIGITS_FILE} is missing ({err}); reinstall lightning_mgpu.") from err
    if hashlib.sha256(data).hexdigest() != DIGITS_SHA256:
        raise RuntimeError(
            f"the digits data file {DIGITS_FILE} is altered (its sha256 differs); reinstall lightning_mgpu."
        )
    raw = np.loadtxt(io.BytesIO(gzip.decompress(data)), delimiter=",", dtype=np.float32)  # the bytes checked above
    x = torch.from_numpy(raw[:, :-1].reshape(-1, 1, 8, 8)) / 16.0  # pixels are integers 0-16: exact in float32
    y = torch.from_numpy(raw[:, -1].astype(np.int64))
    return x, y


class DigitsDataModule(LightningDataModule):
    """Digits split into a fixed train and validation set.

    Args:
        batch_size: per-device batch size; the effective batch is this times devices, nodes and
            gradient accumulation.
        val_fraction: share of the 1797 images held out for validation (stratification-free,
            fixed permutation so every rank and every run sees the same split).
        num_workers: DataLoader workers.
        split_seed: seed of the permutation.
        drop_last: drop the last incomplete training batch (useful for ``dp`` with tiny last batches).
        seed: seed of the loaders' own generators (shuffle order); the global RNG is left to the model.

    Example::

        dm = DigitsDataModule(batch_size=32)
        Trainer(strategy="ddp", devices=2).fit(ImageClassifier(), dm)
    """

    num_classes = 10
    image_shape = (1, 8, 8)

    def __init__(
        self,
        batch_size: int = 32,
        val_fraction: float = 0.2,
        num_workers: int = 0,
        split_seed: int = 0,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}.")
        self.save_hyperparameters()
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        x, y = load_digits_tensors()
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.hparams["split_seed"]))
        n_val = int(round(len(x) * self.hparams["val_fraction"]))
        val_idx, train_idx = perm[:n_val], perm[n_val:]
        self.train_set = TensorDataset(x[train_idx], y[train_idx])
        self.val_set = TensorDataset(x[val_idx], y[val_idx])

    def _loader(self, dataset: TensorDataset, shuffle: bool, drop_last: bool) -> DataLoader:
        # Stateful and seeded, so that a mid-epoch checkpoint resumes exactly (lightning_mgpu.data.loader).
        return resumable_loader(
            dataset,
            batch_size=self.hparams["batch_size"],
            shuffle=shuffle,
            seed=self.hparams["seed"],
            drop_last=drop_last,
            num_workers=self.hparams["num_workers"],
        )

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None
        return self._loader(self.train_set, shuffle=True, drop_last=self.hparams["drop_last"])

    def val_dataloader(self) -> DataLoader:
        assert self.val_set is not None
        return self._loader(self.val_set, shuffle=False, drop_last=False)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()
