"""``dp``: ``torch.nn.DataParallel`` for Lightning 2.x, replica-safe, with exact loss reduction.

``strategy.py`` is the Lightning strategy; ``engine.py`` the DataParallel wrapper it drives; ``replica.py``
what each replica runs; ``reduce.py`` how replica outputs and losses combine. Several replicas on one CPU device,
to check a module without GPUs: :mod:`lightning_mgpu.testing.dp`.
"""

from lightning_mgpu.strategies.dp.strategy import (
    BatchSplitError,
    DataParallelStrategy,
    LightningDataParallel,
    SmallBatchError,
)
from lightning_mgpu.utilities.deprecation import moved_names

__all__ = ["BatchSplitError", "DataParallelStrategy", "LightningDataParallel", "SmallBatchError"]

__getattr__ = moved_names(__name__)  # names that moved out, with a DeprecationWarning (CHANGELOG.md)
