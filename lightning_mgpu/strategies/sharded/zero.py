"""``sharded_zero``: torch's ``ZeroRedundancyOptimizer`` (ZeRO-1) with ``DistributedDataParallel``, no FairScale needed.

Every rank keeps only its shard of the optimizer state; DDP all-reduces the gradients in full, so Lightning's stock
precision plugins and gradient clipping are already correct. FairScale has had no release since 2022: this is the
sharded path that keeps working with future torch releases.

Names registered with Lightning::

    Trainer(strategy="sharded_zero")        # launched like "ddp"
    Trainer(strategy="sharded_zero_spawn")  # launched like "ddp_spawn"
    Trainer(strategy="sharded_zero_notebook")  # launched like "ddp_notebook" (forks: notebooks)
"""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.plugins.precision import Precision
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.strategies._sharded_base import CheckpointFormat, StartMethod
from lightning_mgpu.strategies.sharded.base import OptimizerShardedBase
from lightning_mgpu.strategies.sharded.optim import ShardedOptimizerFactory

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["DDP_OPTIONS", "ZeroStrategy", "make_zero"]

# Lightning's DDPStrategy accepts these beside DistributedDataParallel's own keyword arguments.
_LIGHTNING_DDP_EXTRAS = frozenset({"ddp_comm_state", "ddp_comm_hook", "ddp_comm_wrapper"})


def _ddp_options() -> frozenset[str]:
    from torch.nn.parallel import DistributedDataParallel

    own = set(inspect.signature(DistributedDataParallel.__init__).parameters) - {"self", "module", "device_ids"}
    return frozenset(own | _LIGHTNING_DDP_EXTRAS)


DDP_OPTIONS = _ddp_options()


def make_zero() -> ShardedOptimizerFactory:
    """A factory for :func:`~lightning_mgpu.strategies.sharded.optim.rebuild_optimizer` that builds ZeRO-1."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def factory(param_groups: list[dict[str, Any]], optim_cls: type[Optimizer], defaults: dict[str, Any]) -> Optimizer:
        return ZeroRedundancyOptimizer(param_groups, optimizer_class=optim_cls, **defaults)

    return factory


class ZeroStrategy(OptimizerShardedBase):
    """ZeRO-1 on torch alone: ``ZeroRedundancyOptimizer`` keeps 1/N of the optimizer state, DDP all-reduces gradients.

    Args:
        accelerator, parallel_devices, cluster_environment, checkpoint_io, precision_plugin: as for
            Lightning's ``DDPStrategy``; the Trainer normally fills them in.
        find_unused_parameters: passed to DDP.
        checkpoint_format: ``"full"`` (the default): one file, consolidated on rank 0; ``"sharded"``: a folder into
            which each rank writes its optimizer shard.
        async_save: with ``checkpoint_format="sharded"``, write the folder in the background (see
            :class:`~lightning_mgpu.strategies._sharded_base.ShardedBase`).
        process_group_backend, timeout, start_method: as for ``DDPStrategy``.
        **kwargs: passed to ``DistributedDataParallel`` (e.g. ``static_graph``, ``bucket_cap_mb``) through Lightning's
            ``DDPStrategy`` (``ddp_comm_hook``, ...).

    Raises:
        ValueError: a keyword ``DistributedDataParallel`` does not accept, ``model_averaging_period`` (post-local SGD
            replaces the optimizer step: use ``strategy='ddp'``), an unknown checkpoint format, or ``async_save``
            with ``checkpoint_format="full"``.

    Example::

        import lightning.pytorch as pl
        import lightning_mgpu  # registers "sharded_zero", "_spawn" and "_notebook"
        from lightning_mgpu.strategies import ZeroStrategy

        trainer = pl.Trainer(strategy="sharded_zero", accelerator="gpu", devices=4)
        trainer = pl.Trainer(strategy=ZeroStrategy(static_graph=True), accelerator="gpu", devices=4)
    """

    strategy_name = "sharded_zero"
    notebook_name = "sharded_zero_notebook"

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        find_unused_parameters: bool = False,
        checkpoint_format: CheckpointFormat | None = None,
        async_save: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: StartMethod = "popen",
        **kwargs: Any,
    ) -> None:
        if kwargs.get("model_averaging_period") is not None:
            raise ValueError("ZeroStrategy does not support post-local SGD model averaging; use strategy='ddp' for it.")
        unknown = sorted(set(kwargs) - DDP_OPTIONS)
        if unknown:
            raise ValueError(
                f"ZeroStrategy got option(s) {unknown} that torch.nn.parallel.DistributedDataParallel does not accept."
                f" Accepted: {sorted(DDP_OPTIONS)}."
            )
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
            checkpoint_format=checkpoint_format,
            async_save=async_save,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            find_unused_parameters=bool(find_unused_parameters),
            **kwargs,
        )

    @property
    def find_unused_parameters(self) -> bool:
        """Whether DDP allows parameters that get no gradient on some rank."""
        return bool(self._ddp_kwargs.get("find_unused_parameters", False))

    @override
    def _optimizer_factory(self) -> ShardedOptimizerFactory:
        return make_zero()

    @override
    def _setup_fit(self, trainer: pl.Trainer) -> None:
        # DDP first (Lightning's configure_ddp), then the optimizers over its parameters, then ZeRO.
        self.configure_ddp()
        self.setup_optimizers(trainer)
        self._shard_optimizers()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        description = "Sharded data parallel on torch ZeroRedundancyOptimizer + DDP (ZeRO-1)"
        cls._register_pair(
            strategy_registry, cls.strategy_name, "sharded_zero_spawn", description, notebook_name=cls.notebook_name
        )
