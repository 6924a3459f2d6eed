"""lightning_mgpu: multi-GPU strategies, callbacks, monitoring and data tools for PyTorch Lightning 2.x.

Importing the package registers the strategy names ``dp``, ``ddp2``, ``horovod``, ``sharded``,
``sharded_spawn``, ``ddp_sharded``, ``ddp_sharded_spawn`` (and their variants) in Lightning's ``StrategyRegistry``,
so ``Trainer(strategy="dp")`` works. Lightning's own ``ddp`` and ``ddp_spawn`` are untouched.
"""

from importlib.metadata import PackageNotFoundError, version

from lightning_mgpu.strategies import (
    DataParallelStrategy,
    DDP2Strategy,
    HorovodStrategy,
    ShardedStrategy,
    register_bundle_strategies,
)

try:  # pyproject.toml is the one place the version is written
    __version__ = version("lightning_mgpu")
except PackageNotFoundError:  # a source checkout on PYTHONPATH, not installed
    __version__ = "0+unknown"

register_bundle_strategies()

__all__ = ["DDP2Strategy", "DataParallelStrategy", "HorovodStrategy", "ShardedStrategy", "__version__", "register_bundle_strategies"]
