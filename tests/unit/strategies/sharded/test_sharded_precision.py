"""The sharded strategy's own precision: shard-aware scalers and clipping for each engine.

The scaler across processes: ``tests/integration/plugins/precision/test_shard_aware.py``.
"""

from __future__ import annotations

import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from lightning_mgpu.plugins import ShardAwareGradScaler
from lightning_mgpu.strategies.sharded import ShardedStrategy, ZeroStrategy


def test_fairscale_installs_a_shard_aware_scaler_keeping_its_settings() -> None:
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7))
    strategy = ShardedStrategy(precision_plugin=plugin)
    assert strategy.shards_gradients
    built = strategy.precision_plugin  # the Trainer reads it from the strategy
    assert isinstance(built.scaler, ShardAwareGradScaler)
    assert (built.scaler.get_scale(), built.scaler.get_growth_interval()) == (1024.0, 7)
    # Assigning again keeps the plugin and the scaler that are already shard-aware.
    kept = built.scaler
    strategy.precision_plugin = built
    assert strategy.precision_plugin is built and built.scaler is kept


def test_zero_keeps_the_plain_plugin_and_scaler() -> None:
    # ZeRO-1 all-reduces full gradients: a shard-aware scaler would add one all_reduce per unscale_ for nothing.
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    strategy = ZeroStrategy(precision_plugin=plugin)
    assert not strategy.shards_gradients
    assert strategy.precision_plugin is plugin and type(plugin.scaler) is torch.amp.GradScaler
