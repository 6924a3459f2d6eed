"""``horovod``: Horovod data parallelism on Lightning 2.x (stub until its issue lands)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import ParallelStrategy

from lightning_mgpu.strategies.registry import register_strategy


class HorovodStrategy(ParallelStrategy):
    strategy_name = "horovod"

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> list[str]:
        register_strategy(strategy_registry, "horovod", cls, description="Horovod ring all-reduce (horovodrun or self-launch)")
        return ["horovod"]
