"""The bundle's strategy names, readable without importing torch or Lightning: command lines (``examples/train.py``,
``lightning-mgpu``) check a name before they import anything heavy. The strategy classes register these names
(``register_strategies``); ``tests/unit/strategies/test_registry.py`` checks that the two agree."""

from __future__ import annotations

#: Every name the bundle registers, in registration order.
BUNDLE_STRATEGY_NAMES: tuple[str, ...] = (
    "dp",
    "ddp2",
    "horovod",
    "sharded",
    "sharded_spawn",
    "sharded_notebook",
    "ddp_sharded",
    "ddp_sharded_spawn",
    "ddp_sharded_find_unused_parameters_false",
    "ddp_sharded_spawn_find_unused_parameters_false",
    "sharded_find_unused_parameters_true",
    "sharded_spawn_find_unused_parameters_true",
    "sharded_zero",
    "sharded_zero_spawn",
    "sharded_zero_notebook",
    "sharded_fsdp2",
    "sharded_fsdp2_spawn",
    "sharded_fsdp2_notebook",
)
#: The names of the three sharded engines, ShardedStrategy, ZeroStrategy and FSDP2Strategy (they take
#: --checkpoint-format).
SHARDED_NAMES = frozenset(BUNDLE_STRATEGY_NAMES[3:])
#: The names on torch FSDP2 (they take FSDP2's policies).
FSDP2_NAMES = frozenset({"sharded_fsdp2", "sharded_fsdp2_spawn", "sharded_fsdp2_notebook"})
