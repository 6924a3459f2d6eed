"""``dp``: torch.nn.DataParallel on Lightning 2.x (stub until its issue lands)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import ParallelStrategy

from lightning_mgpu.strategies.registry import register_strategy


class DataParallelStrategy(ParallelStrategy):
    strategy_name = "dp"

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> list[str]:
        register_strategy(strategy_registry, "dp", cls, description="torch.nn.DataParallel: one process, several GPUs")
        return ["dp"]
