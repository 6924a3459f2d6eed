"""``sharded_fsdp2``: torch's ``fully_shard`` (FSDP2) with the bundle's checkpoints.

``strategy.py`` is the Lightning strategy; ``sharding.py`` applies ``fully_shard``; ``state.py`` turns the DTensor
state into the bundle's checkpoint layout and back. Its precision plugins clip by the global norm of the shards
(:mod:`lightning_mgpu.plugins.precision.fsdp2`).
"""

from lightning_mgpu.strategies.fsdp2.strategy import FSDP2Strategy

__all__ = ["FSDP2Strategy"]
