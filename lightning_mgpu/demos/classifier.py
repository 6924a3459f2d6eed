"""A small CNN image classifier used by the examples, tests and benchmarks."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import nn

OptimizerName = Literal["sgd", "adam", "adamw"]


class GridAvgPool(nn.Module):
    """Average-pool to a ``size`` x ``size`` grid, as ``nn.AdaptiveAvgPool2d(size)`` does.

    Where the input divides evenly it is a plain ``avg_pool2d``, whose CUDA backward is deterministic; adaptive
    pooling's CUDA backward is not, and ``Trainer(deterministic=True)`` (an exact resume on a GPU) refuses it.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if h % self.size or w % self.size:
            return F.adaptive_avg_pool2d(x, self.size)
        return F.avg_pool2d(x, kernel_size=(h // self.size, w // self.size))


class ImageClassifier(LightningModule):
    """A CNN with BatchNorm whose steps compute the loss inside the module.

    Computing the loss inside ``training_step`` keeps ``dp`` balanced: each replica reduces its
    own chunk to a scalar instead of gathering full logits onto GPU 0. BatchNorm is there so that
    ``Trainer(sync_batchnorm=True)`` has something to synchronise.

    Args:
        in_channels: channels of the input images.
        num_classes: number of target classes.
        width: channels of the first conv layer; the second has twice as many.
        lr: learning rate.
        weight_decay: weight decay passed to the optimizer.
        optimizer: ``"sgd"`` (momentum 0.9), ``"adam"`` or ``"adamw"``.
        momentum: SGD momentum.

    Example::

        model = ImageClassifier(in_channels=1, num_classes=10, lr=0.05)
        Trainer(strategy="ddp", devices=2).fit(model, DigitsDataModule())
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        width: int = 32,
        lr: float = 0.05,
        weight_decay: float = 0.0,
        optimizer: OptimizerName = "sgd",
        momentum: float = 0.9,
    ) -> None:
        super().__init__()
        if optimizer not in ("sgd", "adam", "adamw"):
            raise ValueError(f"optimizer={optimizer!r} is not supported; choose one of 'sgd', 'adam', 'adamw'.")
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}.")
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            # Pool to a fixed 2x2 grid so any input size (8x8 digits, 32x32 synthetic) works.
            GridAvgPool(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(8 * width, 128), nn.ReLU(inplace=True), nn.Linear(128, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def _eval_step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=-1) == y).float().mean()
        # sync_dist so every rank (and the checkpoint callback) sees the global value.
        self.log(f"{stage}_loss", loss, prog_bar=True, sync_dist=True)
        self.log(f"{stage}_acc", acc, prog_bar=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._eval_step(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._eval_step(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x).argmax(dim=-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        lr, decay = hp["lr"], hp["weight_decay"]
        if hp["optimizer"] == "sgd":
            return torch.optim.SGD(self.parameters(), lr=lr, momentum=hp["momentum"], weight_decay=decay)
        if hp["optimizer"] == "adam":
            return torch.optim.Adam(self.parameters(), lr=lr, weight_decay=decay)
        return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=decay)
