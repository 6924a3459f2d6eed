"""Horovod's view of the job (ranks, sizes, rendezvous address) as a Lightning ``ClusterEnvironment``."""

from __future__ import annotations

import os

from lightning.fabric.plugins import ClusterEnvironment
from typing_extensions import override

from lightning_mgpu.strategies.horovod import runtime

__all__ = ["HorovodEnvironment"]


class HorovodEnvironment(ClusterEnvironment):
    """Ranks and sizes as Horovod reports them; Horovod's launchers or the self-launch start the processes.

    Lightning would otherwise attach its default environment, whose teardown deletes ``WORLD_SIZE``
    from ``os.environ``; this one leaves the environment alone.
    """

    @property
    @override
    def creates_processes_externally(self) -> bool:
        return True

    @property
    @override
    def main_address(self) -> str:
        return os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1")

    @property
    @override
    def main_port(self) -> int:
        return int(os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT", "0"))

    @staticmethod
    @override
    def detect() -> bool:
        return runtime.launched_by_horovod()

    @override
    def world_size(self) -> int:
        return runtime.horovod_torch().size() if runtime.is_initialized() else 1

    @override
    def set_world_size(self, size: int) -> None:
        pass  # Horovod decides

    @override
    def global_rank(self) -> int:
        return runtime.horovod_torch().rank() if runtime.is_initialized() else 0

    @override
    def set_global_rank(self, rank: int) -> None:
        pass  # Horovod decides

    @override
    def local_rank(self) -> int:
        return runtime.horovod_torch().local_rank() if runtime.is_initialized() else 0

    @override
    def node_rank(self) -> int:
        return runtime.horovod_torch().cross_rank() if runtime.is_initialized() else 0

    @override
    def teardown(self) -> None:
        pass
