"""The smallest LightningModule the tests fit when what they check is the Trainer around it (a converted script's
Trainer call, a resume, a callback's hooks), not the model.

``tiny_module(namespace)`` builds it on ``lightning.pytorch``'s or ``pytorch_lightning``'s LightningModule (a script
converted from 1.x imports ``pytorch_lightning``, and its Trainer accepts only that namespace's modules); each class
is built once, on first use, so a test that never asks for ``pytorch_lightning`` does not import it.

Example::

    model = tiny_module("pytorch_lightning")  # Linear(3, 1); batches of (x,) with x of shape (n, 3)
    quiet_trainer("pytorch_lightning", max_epochs=1).fit(model, DataLoader(TensorDataset(torch.randn(8, 3))))
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

_BUILT: dict[str, type] = {}


def _tiny_class(base: type) -> type:
    class TinyModule(base):  # type: ignore[valid-type,misc]
        """``Linear(features, 1)``; the loss is the mean square of its output on ``batch[0]``; SGD at ``lr``."""

        def __init__(self, features: int = 3, lr: float = 0.01) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(features, 1)
            self.lr = lr

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    return TinyModule


def tiny_module_class(namespace: str = "lightning.pytorch") -> type:
    """The tiny module's class on ``namespace``'s LightningModule (``"lightning.pytorch"`` or
    ``"pytorch_lightning"``), built once."""
    if namespace not in _BUILT:
        cls = _tiny_class(importlib.import_module(namespace).LightningModule)
        cls.__qualname__ = cls.__name__ = "TinyModule" if namespace == "lightning.pytorch" else "PLTinyModule"
        _BUILT[namespace] = cls
    return _BUILT[namespace]


def tiny_module(namespace: str = "lightning.pytorch", **kwargs: Any) -> Any:
    """A new tiny module on ``namespace``'s LightningModule; ``kwargs``: ``features`` (3), ``lr`` (0.01)."""
    return tiny_module_class(namespace)(**kwargs)
