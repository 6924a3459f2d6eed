"""A deterministic model and its data, to compare a strategy's final weights with one process on the global batch.

Every configuration sees the same global batches in the same order and starts from the same weights (the init
depends only on ``init_seed``), so after the same steps the parameters under ``ddp``, ``dp``, ``horovod``, a sharded
engine or one device agree to float rounding. The bundle's parity tests and ``benchmarks/bench_parity.py`` use it.

Example::

    from lightning_mgpu.testing import ParityModule, max_abs_diff, quiet_trainer

    one = ParityModule(); quiet_trainer(max_steps=5).fit(one)
    two = ParityModule(); quiet_trainer(strategy=EmulatedDataParallelStrategy(), devices=2, max_steps=5).fit(two)
    assert max_abs_diff(one.state_dict(), two.state_dict()) < 1e-5
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

__all__ = ["HIDDEN", "IN", "OUT", "ParityModule", "make_data", "max_abs_diff", "parity_module_for", "picklable"]

IN, HIDDEN, OUT = 16, 64, 4


def make_data(n: int, seed: int = 123) -> TensorDataset:
    """``n`` samples of a noisy linear map from ``IN`` to ``OUT`` features, the same for a given ``seed``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    w = torch.randn(IN, OUT, generator=g)
    y = x @ w + 0.1 * torch.randn(n, OUT, generator=g)
    return TensorDataset(x, y)


def max_abs_diff(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """The largest absolute difference between two state dicts with the same keys.

    Raises:
        AssertionError: the keys differ (both lists are shown).
    """
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def picklable(cls: type, name: str, module: str) -> type:
    """``cls`` renamed to ``module.name``: spawned workers unpickle it by reference."""
    cls.__name__ = cls.__qualname__ = name
    cls.__module__ = module
    return cls


def pytorch_lightning_twin(module_globals: dict[str, Any], name: str, build: Callable[[Any], type]) -> type:
    """``build(pytorch_lightning)`` as ``module_globals[name]``, built once (a module ``__getattr__`` calls this):
    importing the second Lightning costs seconds that a caller without it should not pay."""
    if name not in module_globals:
        import pytorch_lightning

        module_globals[name] = picklable(build(pytorch_lightning), name, module_globals["__name__"])
    return module_globals[name]


def _parity_module(base: type) -> type:
    """``ParityModule`` on ``base``: ``lightning.pytorch``'s or ``pytorch_lightning``'s LightningModule (the same code,
    so a fit under either namespace can be compared bit for bit)."""

    class ParityModule(base):
        """An MLP regressor whose init depends only on ``init_seed``.

        Args:
            optimizer: ``"sgd"`` (momentum 0.9) or ``"adam"``.
            lr: the learning rate.
            init_seed: seeds the weights.
            manual: manual optimization (one ``manual_backward`` and step per batch).
            global_batch: the batch across all ranks; each rank's loader takes ``global_batch / world_size``.
            num_samples: samples per epoch.
            hidden: the hidden width.

        Raises:
            ValueError: (at fit) ``global_batch`` does not divide by the world size.
        """

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

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
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
            # No shuffling: every configuration sees the same batches in the same order.
            sampler: DistributedSampler | None = (
                DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False) if world > 1 else None
            )
            return DataLoader(data, batch_size=self.hparams.global_batch // world, sampler=sampler, shuffle=False)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            if self.hparams.optimizer == "adam":
                return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)

    return ParityModule


ParityModule = picklable(_parity_module(pl.LightningModule), "ParityModule", __name__)


def __getattr__(name: str) -> type:
    """``PLParityModule``: the same model for ``pytorch_lightning``, built on first use."""
    if name == "PLParityModule":
        return pytorch_lightning_twin(globals(), name, lambda lightning: _parity_module(lightning.LightningModule))
    raise AttributeError(name)


def parity_module_for(namespace: str) -> type:
    """``ParityModule`` for ``"lightning.pytorch"`` or ``PLParityModule`` for ``"pytorch_lightning"``."""
    return ParityModule if namespace == "lightning.pytorch" else __getattr__("PLParityModule")
