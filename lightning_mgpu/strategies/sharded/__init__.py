"""``sharded``: ZeRO-style sharded data parallelism (FairScale OSS + ShardedDataParallel, or torch ZeRO-1).

``strategy.py`` is the Lightning strategy; ``fairscale.py`` the FairScale backend; ``zero.py`` the torch
backend; ``optim.py`` rebuilding optimizers as sharded ones; ``precision.py`` shard-aware clipping and scaling.
"""

from lightning_mgpu.strategies.sharded.optim import (
    local_optimizer,
    local_optimizer_state_bytes,
)
from lightning_mgpu.strategies.sharded.precision import (
    ShardAwareGradScaler,
    ShardedDoublePrecision,
    ShardedHalfPrecision,
    ShardedMixedPrecision,
    ShardedPrecision,
)
from lightning_mgpu.strategies.sharded.strategy import ShardedStrategy

__all__ = [
    "ShardAwareGradScaler",
    "ShardedDoublePrecision",
    "ShardedHalfPrecision",
    "ShardedMixedPrecision",
    "ShardedPrecision",
    "ShardedStrategy",
    "local_optimizer",
    "local_optimizer_state_bytes",
]
