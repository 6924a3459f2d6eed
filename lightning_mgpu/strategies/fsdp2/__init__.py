"""``sharded_fsdp2``: torch's ``fully_shard`` (FSDP2) with the bundle's checkpoints.

``strategy.py`` is the Lightning strategy; ``sharding.py`` applies ``fully_shard``; ``state.py`` turns the DTensor
state into the bundle's checkpoint layout and back; ``precision.py`` clips by the global norm of the shards.
"""

from lightning_mgpu.strategies.fsdp2.precision import (
    FSDP2DoublePrecision,
    FSDP2HalfPrecision,
    FSDP2MixedPrecision,
    FSDP2Precision,
)
from lightning_mgpu.strategies.fsdp2.strategy import FSDP2Strategy

__all__ = ["FSDP2DoublePrecision", "FSDP2HalfPrecision", "FSDP2MixedPrecision", "FSDP2Precision", "FSDP2Strategy"]
