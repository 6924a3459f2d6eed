"""lightning_mgpu: multi-GPU strategies, callbacks, monitoring and data tools for PyTorch Lightning 2.x.

Importing the package registers the strategy names ``dp``, ``horovod``, ``sharded``,
``sharded_spawn``, ``ddp_sharded`` and ``ddp_sharded_spawn`` in Lightning's ``StrategyRegistry``,
so ``Trainer(strategy="dp")`` works. Lightning's own ``ddp`` and ``ddp_spawn`` are untouched.
"""

from lightning_mgpu.strategies import (
    DataParallelStrategy,
    HorovodStrategy,
    ShardedStrategy,
    register_bundle_strategies,
)

__version__ = "0.1.0"

register_bundle_strategies()

__all__ = ["DataParallelStrategy", "HorovodStrategy", "ShardedStrategy", "__version__", "register_bundle_strategies"]
