"""The one small test model: a deterministic MLP regressor and its data.

Every configuration sees the same global batches in the same order, so a strategy's final parameters can be
compared with single-process training on the global batch (see ``tests/integration/runners/run_parity.py``).
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tests.helpers.namespaces import picklable, pytorch_lightning_twin

IN, HIDDEN, OUT = 16, 64, 4


def make_data(n: int, seed: int = 123) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    w = torch.randn(IN, OUT, generator=g)
    y = x @ w + 0.1 * torch.randn(n, OUT, generator=g)
    return TensorDataset(x, y)


def _parity_module(base: type) -> type:
    """``ParityModule`` on ``base``: ``lightning.pytorch``'s or ``pytorch_lightning``'s LightningModule (the same code,
    so a fit under either namespace can be compared bit for bit)."""

    class ParityModule(base):  # type: ignore[valid-type,misc]
        """An MLP regressor whose init depends only on ``init_seed``."""

        def __init__(
            self,
            optimizer: str = "sgd",
            lr: float = 0.1,
            init_seed: int = 0,
            manual: bool = False,
            global_batch: int = 32,
            num_samples: int = 160,
            hidden: int = HIDDEN,
        ) -> None:
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(init_seed)
            self.net = nn.Sequential(
                nn.Linear(IN, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, OUT)
            )
            self.automatic_optimization = not manual

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            if not self.automatic_optimization:
                opt = self.optimizers()
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
            self.log("train_loss", loss)
            return loss

        def train_dataloader(self) -> DataLoader:
            world, rank = self.trainer.world_size, self.trainer.global_rank
            if self.hparams.global_batch % world:
                raise ValueError(f"global batch {self.hparams.global_batch} must divide by the world size {world}")
            data = make_data(self.hparams.num_samples)
            sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False) if world > 1 else None
            return DataLoader(data, batch_size=self.hparams.global_batch // world, sampler=sampler, shuffle=False)

        def configure_optimizers(self):
            if self.hparams.optimizer == "adam":
                return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)

    return ParityModule


ParityModule = picklable(_parity_module(pl.LightningModule), "ParityModule", __name__)
"""An MLP regressor whose init depends only on ``init_seed``."""


def __getattr__(name: str) -> type:
    """``PLParityModule``: the same model for ``pytorch_lightning``, built on first use (importing the second Lightning
    costs seconds, which no test that does not need it should pay)."""
    if name == "PLParityModule":
        return pytorch_lightning_twin(globals(), name, lambda lightning: _parity_module(lightning.LightningModule))
    raise AttributeError(name)


def parity_module_for(namespace: str) -> type:
    """``ParityModule`` for ``"lightning.pytorch"`` or ``PLParityModule`` for ``"pytorch_lightning"``."""
    return ParityModule if namespace == "lightning.pytorch" else __getattr__("PLParityModule")
