"""Plugins the strategies train with, as Lightning arranges them: ``precision/`` holds each sharded engine's precision
plugins (clipping by the global norm of the shards) and the grad scaler that agrees across ranks."""

from lightning_mgpu.plugins.precision import (
    FSDP2DoublePrecision,
    FSDP2HalfPrecision,
    FSDP2MixedPrecision,
    FSDP2Precision,
    ShardAwareGradScaler,
    ShardedDoublePrecision,
    ShardedHalfPrecision,
    ShardedMixedPrecision,
    ShardedPrecision,
)

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
