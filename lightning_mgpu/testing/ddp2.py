"""``ddp2`` with CPU "devices" per node: the DataParallel-within-DDP path on a machine without GPUs.

The replicas of each node run as CPU threads through
:class:`~lightning_mgpu.testing.dp.EmulatedDataParallel`; the node processes synchronise with real
DDP over gloo.
"""

from __future__ import annotations

from lightning_mgpu.strategies.ddp2.strategy import DDP2Strategy
from lightning_mgpu.testing.dp import EmulatedDevices


class EmulatedDDP2Strategy(EmulatedDevices, DDP2Strategy):
    """``ddp2`` whose node devices are CPU threads.

    Example::

        # on each of 2 "nodes": torchrun --nnodes 2 --nproc-per-node 1 ... with
        Trainer(strategy=EmulatedDDP2Strategy(), accelerator="cpu", devices=2, num_nodes=2)
    """
