"""``unwrap_optimizer``: the optimizer inside Lightning's wrapper."""

from __future__ import annotations

import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from torch import nn

from lightning_mgpu.utilities.optimizers import unwrap_optimizer


def test_unwrap_peels_lightning_optimizers_only() -> None:
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)
    assert unwrap_optimizer(opt) is opt
    assert unwrap_optimizer(LightningOptimizer(opt)) is opt
