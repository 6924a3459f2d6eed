"""The torch side of the ``sharded`` strategy: ``ZeroRedundancyOptimizer`` (ZeRO-1) with ``DistributedDataParallel``.

Every rank keeps only its shard of the optimizer state; gradients are all-reduced in full by DDP, so the
stock precision plugins and gradient clipping are already correct.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.strategies.sharded.backend import OptimizerShardingBackend, ShardedOptions

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["DDP_OPTIONS", "TorchZeroBackend", "make_zero"]

# Lightning's DDPStrategy accepts these beside DistributedDataParallel's own keyword arguments.
_LIGHTNING_DDP_EXTRAS = frozenset({"ddp_comm_state", "ddp_comm_hook", "ddp_comm_wrapper"})


def _ddp_options() -> frozenset[str]:
    from torch.nn.parallel import DistributedDataParallel

    own = set(inspect.signature(DistributedDataParallel.__init__).parameters) - {"self", "module", "device_ids"}
    return frozenset(own | _LIGHTNING_DDP_EXTRAS)


DDP_OPTIONS = _ddp_options()


def make_zero() -> Any:
    """A factory for :func:`~lightning_mgpu.strategies.sharded.optim.rebuild_optimizer` that builds ZeRO-1."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def factory(param_groups: list[dict[str, Any]], optim_cls: type[Optimizer], defaults: dict[str, Any]) -> Optimizer:
        return ZeroRedundancyOptimizer(param_groups, optimizer_class=optim_cls, **defaults)

    return factory


class TorchZeroBackend(OptimizerShardingBackend):
    """``backend="torch"``: DDP all-reduces full gradients, ``ZeroRedundancyOptimizer`` keeps 1/N of the state."""

    name = "torch"

    @classmethod
    @override
    def check_options(cls, options: ShardedOptions) -> None:
        super().check_options(options)
        if options.reduce_buffer_size is not None:
            raise ValueError(
                "ShardedStrategy(reduce_buffer_size=...) is a FairScale option; with backend='torch' DDP buckets the"
                " gradients: pass `bucket_cap_mb=...` instead."
            )
        if options.broadcast_fp16:
            raise ValueError(
                "ShardedStrategy(broadcast_fp16=True) is a FairScale option; remove it with backend='torch'."
            )
        kwargs = options.wrapper_kwargs
        if kwargs.get("model_averaging_period") is not None:
            raise ValueError(
                "ShardedStrategy does not support post-local SGD model averaging; use strategy='ddp' for it."
            )
        unknown = sorted(set(kwargs) - DDP_OPTIONS)
        if unknown:
            raise ValueError(
                f"ShardedStrategy(backend='torch') got option(s) {unknown} that torch.nn.parallel.DistributedDataParallel"
                f" does not accept. Accepted: {sorted(DDP_OPTIONS)}."
            )

    @override
    def ddp_kwargs(self) -> dict[str, Any]:
        return {**self.options.wrapper_kwargs, "find_unused_parameters": self.options.find_unused_parameters}

    @override
    def optimizer_factory(self) -> Any:
        return make_zero()

    @override
    def setup_fit(self, trainer: pl.Trainer) -> None:
        # DDP first (Lightning's configure_ddp), then the optimizers over its parameters, then ZeRO.
        self.strategy.configure_ddp()
        self.strategy.setup_optimizers(trainer)
        self.shard_optimizers()
