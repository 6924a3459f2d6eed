"""The sharded strategy's own precision: shard-aware scalers and clipping for every backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn

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


def _sharded_scaler_worker(rank: int, port: int, result_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        results = {}
        for name, scaler in (("plain", torch.amp.GradScaler("cpu")), ("shard_aware", ShardAwareGradScaler("cpu"))):
            param = nn.Parameter(torch.ones(3))
            opt = torch.optim.SGD([param], lr=1.0)
            scaler.scale(torch.ones(()))  # starts the scaler (its scale is created lazily)
            # Rank 1's shard of the gradients overflowed, rank 0's did not.
            param.grad = torch.full((3,), float("inf") if rank == 1 else 1.0)
            scaler.step(opt)
            scaler.update()
            results[name] = {"param": param.detach().clone(), "scale": scaler.get_scale()}
        torch.save(results, f"{result_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.integration
def test_shard_aware_scaler_skips_the_step_on_every_rank(tmp_path: Path) -> None:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    mp.start_processes(_sharded_scaler_worker, args=(find_free_network_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for name in ("plain", "shard_aware"):
        assert torch.equal(r1[name]["param"], torch.ones(3)) and r1[name]["scale"] == 2.0**15  # the overflowing rank skips
    # A plain scaler lets rank 0 step: the ranks diverge. The shard-aware one skips on both.
    assert not torch.equal(r0["plain"]["param"], torch.ones(3)) and r0["plain"]["scale"] == 2.0**16
    assert torch.equal(r0["shard_aware"]["param"], torch.ones(3)) and r0["shard_aware"]["scale"] == 2.0**15
