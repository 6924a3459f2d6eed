"""The sharded strategy's own precision: shard-aware scalers and clipping for every backend.

The in-process tests; the ones that launch processes are in ``tests/integration/strategies/sharded/test_sharded_precision.py``.
"""

from __future__ import annotations

import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from lightning_mgpu.strategies.sharded import ShardAwareGradScaler, ShardedStrategy


def test_fairscale_backend_installs_a_shard_aware_scaler_keeping_its_settings() -> None:
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7))
    strategy = ShardedStrategy(backend="fairscale", precision_plugin=plugin)
    assert strategy.shards_gradients
    assert strategy.precision_plugin is plugin  # the Trainer holds the same object
    assert isinstance(plugin.scaler, ShardAwareGradScaler)
    assert (plugin.scaler.get_scale(), plugin.scaler.get_growth_interval()) == (1024.0, 7)
    # Assigning again keeps the scaler that is already shard-aware.
    kept = plugin.scaler
    strategy.precision_plugin = plugin
    assert plugin.scaler is kept


def test_torch_backend_keeps_the_plain_scaler() -> None:
    # ZeRO-1 all-reduces full gradients: a shard-aware scaler would add one all_reduce per unscale_ for nothing.
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    strategy = ShardedStrategy(backend="torch", precision_plugin=plugin)
    assert not strategy.shards_gradients
    assert type(plugin.scaler) is torch.amp.GradScaler
