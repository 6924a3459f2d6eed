"""``sharded``: ZeRO-style sharded data parallelism (FairScale OSS + ShardedDataParallel, torch ZeRO-1, or FSDP2).

``strategy.py`` is the Lightning strategy, which delegates every backend-specific step to one backend object
(``backend.py``, the interface): ``fairscale.py`` the FairScale backend, ``zero.py`` the torch one, ``fsdp2.py``
torch's ``fully_shard``. ``optim.py`` rebuilds optimizers as sharded ones; ``precision.py`` makes clipping and
scaling shard-aware.
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
