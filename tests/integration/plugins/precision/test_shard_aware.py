"""``ShardAwareGradScaler`` across processes: a rank whose shard overflowed makes every rank skip the step.

How each engine installs it is tested in process: ``tests/unit/strategies/sharded/test_sharded_precision.py``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from lightning_mgpu.plugins import ShardAwareGradScaler
from tests.helpers.launch import spawn_ranks


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


def test_shard_aware_scaler_skips_the_step_on_every_rank(tmp_path: Path) -> None:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    spawn_ranks(_sharded_scaler_worker, args=(find_free_network_port(), str(tmp_path)), nprocs=2)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for name in ("plain", "shard_aware"):
        assert (
            torch.equal(r1[name]["param"], torch.ones(3)) and r1[name]["scale"] == 2.0**15
        )  # the overflowing rank skips
    # A plain scaler lets rank 0 step: the ranks diverge. The shard-aware one skips on both.
    assert not torch.equal(r0["plain"]["param"], torch.ones(3)) and r0["plain"]["scale"] == 2.0**16
    assert torch.equal(r0["shard_aware"]["param"], torch.ones(3)) and r0["shard_aware"]["scale"] == 2.0**15
