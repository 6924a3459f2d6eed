"""Precision plugins of the sharded engines: ``shard_aware.py`` (the scaler that agrees across ranks, and how an
engine's plugin is built from the one the Trainer chose), ``fairscale.py`` (``ShardedStrategy``) and ``fsdp2.py``
(``FSDP2Strategy``). ZeRO-1 (``ZeroStrategy``) shards no gradients and trains with Lightning's own plugins."""

from lightning_mgpu.plugins.precision.fairscale import (
    ShardedDoublePrecision,
    ShardedHalfPrecision,
    ShardedMixedPrecision,
    ShardedPrecision,
)
from lightning_mgpu.plugins.precision.fsdp2 import (
    FSDP2DoublePrecision,
    FSDP2HalfPrecision,
    FSDP2MixedPrecision,
    FSDP2Precision,
)
from lightning_mgpu.plugins.precision.shard_aware import ShardAwareGradScaler

__all__ = [
    "FSDP2DoublePrecision",
    "FSDP2HalfPrecision",
    "FSDP2MixedPrecision",
    "FSDP2Precision",
    "ShardAwareGradScaler",
    "ShardedDoublePrecision",
    "ShardedHalfPrecision",
    "ShardedMixedPrecision",
    "ShardedPrecision",
]
