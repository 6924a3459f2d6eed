"""``ddp2``: DataParallel within each node, DistributedDataParallel across nodes."""

from lightning_mgpu.strategies.ddp2.strategy import DDP2Strategy, DDP2TopologyError

__all__ = ["DDP2Strategy", "DDP2TopologyError"]
