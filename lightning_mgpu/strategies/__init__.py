"""Strategies that Lightning 2.0 removed, rebuilt for Lightning 2.x: ``dp``, ``ddp2``, ``horovod`` and ``sharded``.

One class per engine (``sharded``: FairScale, torch ZeRO-1, FSDP2), one package per family; ``registry.py`` names them.
"""

from lightning_mgpu.strategies.ddp2 import DDP2Strategy
from lightning_mgpu.strategies.dp import DataParallelStrategy
from lightning_mgpu.strategies.fsdp2 import FSDP2Strategy
from lightning_mgpu.strategies.horovod import HorovodEnvironment, HorovodStrategy
from lightning_mgpu.strategies.registry import (
    BUNDLE_STRATEGY_NAMES,
    StrategyNameClashError,
    register_bundle_strategies,
    register_strategy,
)
from lightning_mgpu.strategies.sharded import ShardedStrategy, ZeroStrategy

__all__ = [
    "BUNDLE_STRATEGY_NAMES",
    "DDP2Strategy",
    "DataParallelStrategy",
    "FSDP2Strategy",
    "HorovodEnvironment",
    "HorovodStrategy",
    "ShardedStrategy",
    "StrategyNameClashError",
    "register_bundle_strategies",
    "register_strategy",
    "ZeroStrategy",
]

# Importing the strategies registers their names (idempotent): `import lightning_mgpu` relies on it, and so does a
# script whose first import is `from lightning_mgpu.strategies import ...`.
register_bundle_strategies()
