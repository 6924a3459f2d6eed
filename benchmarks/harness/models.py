"""The benchmarks' shared model and data: a seeded MLP, seeded random batches and the LightningModule around them.

Every arm and every rank builds the same weights and draws the same data, so arms differ only in what they measure.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def mlp(*widths: int, seed: int = 0) -> nn.Sequential:
    """Linear layers through ``widths`` with a ReLU between each two, from seed ``seed``.

    Example::

        mlp(256, 1024, 1024, 10)  # 256 -> 1024 -> 1024 -> 10
    """
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in pairwise(widths):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def random_data(
    n: int, features: int, *, classes: int | None = None, targets: int | None = None, seed: int = 1
) -> TensorDataset:
    """``n`` standard-normal samples with class labels (``classes``) or normal regression targets (``targets``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g) if classes else torch.randn(n, targets or features, generator=g)
    return TensorDataset(x, y)


def train_step(
    model: nn.Module, optimizer: Any, loss: Callable[[Any, Any], torch.Tensor] = nn.functional.mse_loss
) -> Callable[[Any, Any], None]:
    """A raw loop's step, in Lightning's order: zero_grad, forward, backward, the optimizer's step.

    Example::

        marks = clock.raw_steps(train_step(model, optimizer), loader, warmup + steps + 1, device)[0]
    """

    def step(x: Any, y: Any) -> None:
        optimizer.zero_grad()
        loss(model(x), y).backward()
        optimizer.step()

    return step


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


class Trainable(pl.LightningModule):
    """``net`` trained on ``(x, y)`` batches with ``loss`` and ``optimizer``.

    Args:
        net: the model.
        loss: ``loss(output, y)``, or its name in ``torch.nn.functional`` (``"cross_entropy"``, ``"mse_loss"``).
        optimizer: builds the optimizer from the parameters (SGD with momentum by default).
        loader: builds the training loader from the module (it reads ``self.global_rank``); ``None``: pass one to fit.
    """

    def __init__(
        self,
        net: nn.Module,
        loss: str | Callable[[Any, Any], torch.Tensor] = "cross_entropy",
        optimizer: Callable[[Any], Any] = sgd,
        loader: Callable[[pl.LightningModule], DataLoader] | None = None,
    ) -> None:
        super().__init__()
        self.net, self.loss, self.make_optimizer, self.make_loader = (
            net,
            getattr(nn.functional, loss) if isinstance(loss, str) else loss,
            optimizer,
            loader,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        return self.make_optimizer(self.parameters())

    def train_dataloader(self) -> DataLoader:
        if self.make_loader is None:
            raise RuntimeError("Trainable: pass a loader to fit, or build the module with loader=")
        return self.make_loader(self)
