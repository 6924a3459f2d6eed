"""``sharded``: ZeRO-style sharded data parallelism on FairScale (OSS + ShardedDataParallel) or torch's ZeRO-1.

``strategy.py`` is :class:`ShardedStrategy` (FairScale, ZeRO-2: Lightning 1.x's ``ddp_sharded``), whose FairScale
pieces are in ``fairscale.py`` and whose precision plugins are in :mod:`lightning_mgpu.plugins.precision`; ``zero.py``
is :class:`ZeroStrategy` (torch's ``ZeroRedundancyOptimizer`` with DDP, ZeRO-1). ``base.py`` holds what the two share
(optimizers rebuilt as sharded ones, their state consolidated or written per rank), ``optim.py`` the rebuilding.
FSDP2 is a package of its own: :mod:`lightning_mgpu.strategies.fsdp2`.
"""

from lightning_mgpu.strategies.sharded.strategy import ShardedStrategy
from lightning_mgpu.strategies.sharded.zero import ZeroStrategy

# Measuring what a sharded optimizer holds, where users of the sharded strategies look for it (its home: utilities).
from lightning_mgpu.utilities.deprecation import moved_names
from lightning_mgpu.utilities.optimizers import local_optimizer, local_optimizer_state_bytes

__all__ = [
    "ShardedStrategy",
    "ZeroStrategy",
    "local_optimizer",
    "local_optimizer_state_bytes",
]

__getattr__ = moved_names(__name__)  # names that moved out, with a DeprecationWarning (CHANGELOG.md)
