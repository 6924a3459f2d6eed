"""The torch side of the ``sharded`` strategy: ``ZeroRedundancyOptimizer`` (ZeRO-1) with ``DistributedDataParallel``.

Every rank keeps only its shard of the optimizer state; gradients are all-reduced in full by DDP, so the
stock precision plugins and gradient clipping are already correct.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch.optim import Optimizer

__all__ = ["DDP_OPTIONS", "make_zero"]

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
