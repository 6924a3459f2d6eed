"""``sharded``: FairScale OSS + ShardedDataParallel (ZeRO-2) on Lightning 2.x (stub until its issue lands)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import DDPStrategy

from lightning_mgpu.strategies.registry import register_strategy


class ShardedStrategy(DDPStrategy):
    strategy_name = "sharded"

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> list[str]:
        presets = {
            "sharded": ("popen", "FairScale OSS + ShardedDataParallel (ZeRO-2), launched like ddp"),
            "sharded_spawn": ("spawn", "FairScale OSS + ShardedDataParallel (ZeRO-2), launched like ddp_spawn"),
            "ddp_sharded": ("popen", "Alias of `sharded` (Lightning 1.x name)"),
            "ddp_sharded_spawn": ("spawn", "Alias of `sharded_spawn` (Lightning 1.x name)"),
        }
        for name, (start_method, description) in presets.items():
            register_strategy(strategy_registry, name, cls, description=description, start_method=start_method)
        return list(presets)
