"""Deterministic synthetic image classification data for benchmarks."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.data.loader import resumable_loader


def make_synthetic_images(
    size: int, image_shape: tuple[int, int, int], num_classes: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images whose class sets a fixed mean pattern plus Gaussian noise, so they are learnable.

    The same ``seed`` gives bit-identical tensors on every rank and run.
    """
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.randn((num_classes, *image_shape), generator=g)
    y = torch.randint(0, num_classes, (size,), generator=g)
    x = prototypes[y] + 1.5 * torch.randn((size, *image_shape), generator=g)
    return x, y


class SyntheticImageDataModule(LightningDataModule):
    """Synthetic images held in memory; size, shape and classes configurable.

    The data is generated once in ``setup`` (not in ``__getitem__``), so loading costs nothing
    and benchmarks measure the strategy, not the data pipeline.

    Args:
        size: number of training images.
        image_shape: ``(C, H, W)``.
        num_classes: number of classes.
        batch_size: per-device batch size.
        val_size: number of validation images.
        seed: data seed.
        num_workers: DataLoader workers.
        drop_last: drop the last incomplete training batch.

    Example::

        dm = SyntheticImageDataModule(size=4096, image_shape=(3, 32, 32), batch_size=64)
    """

    def __init__(
        self,
        size: int = 2048,
        image_shape: tuple[int, int, int] = (3, 32, 32),
        num_classes: int = 10,
        batch_size: int = 32,
        val_size: int = 512,
        seed: int = 0,
        num_workers: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__()
        if size < 1 or val_size < 0:
            raise ValueError(f"size must be >= 1 and val_size >= 0, got size={size}, val_size={val_size}.")
        if len(image_shape) != 3:
            raise ValueError(f"image_shape must be (C, H, W), got {image_shape}.")
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}.")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.save_hyperparameters()
        c, h, w = image_shape  # a list from a YAML config becomes the tuple the generator takes
        self.image_shape = (c, h, w)
        self.num_classes = num_classes
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        hp = self.hparams
        size = hp["size"]
        x, y = make_synthetic_images(size + hp["val_size"], self.image_shape, hp["num_classes"], hp["seed"])
        self.train_set = TensorDataset(x[:size], y[:size])
        self.val_set = TensorDataset(x[size:], y[size:])

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None
        # Stateful and seeded, so that a mid-epoch checkpoint resumes exactly (lightning_mgpu.data.loader).
        return resumable_loader(
            self.train_set,
            batch_size=self.hparams["batch_size"],
            shuffle=True,
            seed=self.hparams["seed"],
            drop_last=self.hparams["drop_last"],
            num_workers=self.hparams["num_workers"],
        )

    def val_dataloader(self) -> DataLoader:
        assert self.val_set is not None
        return resumable_loader(
            self.val_set,
            batch_size=self.hparams["batch_size"],
            seed=self.hparams["seed"],
            num_workers=self.hparams["num_workers"],
        )
