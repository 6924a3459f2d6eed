"""FSDP2's choice of full-checkpoint gather (the launched checks are in tests/integration/strategies/sharded/test_fsdp2.py)."""

from __future__ import annotations

import pytest
from torch import nn

from lightning_mgpu.strategies.sharded.fsdp2 import GATHER_ENV, gathers_by_hand


def test_the_environment_forces_or_forbids_the_full_tensor_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    module = nn.Linear(2, 2)
    monkeypatch.delenv(GATHER_ENV, raising=False)
    assert not gathers_by_hand(module)  # CPU parameters, no process group: DCP's gather
    monkeypatch.setenv(GATHER_ENV, "1")
    assert gathers_by_hand(module)
    monkeypatch.setenv(GATHER_ENV, "0")
    assert not gathers_by_hand(module)


def test_checkpoint_format_and_policies_are_checked_before_any_work() -> None:
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    from lightning_mgpu.strategies import ShardedStrategy
    from lightning_mgpu.strategies.sharded.fsdp2 import apply_fully_shard

    assert ShardedStrategy(backend="fsdp2").checkpoint_format == "sharded"
    assert ShardedStrategy(backend="torch").checkpoint_format == "full"  # Lightning 1.x's one file
    assert ShardedStrategy(backend="fsdp2", checkpoint_format="full").checkpoint_format == "full"
    with pytest.raises(ValueError, match="checkpoint_format='zip'\\) is not supported; choose one of"):
        ShardedStrategy(backend="fsdp2", checkpoint_format="zip")  # type: ignore[arg-type]
    # The ZeRO-style backends write their optimizer shards into a folder when asked (not by default).
    assert ShardedStrategy(backend="torch", checkpoint_format="sharded").checkpoint_format == "sharded"
    assert ShardedStrategy(backend="torch").restore_checkpoint_after_setup  # a folder loads into the sharded optimizers
    with pytest.raises(
        ValueError,
        match=r"async_save=True\) writes sharded folders in the background; pass checkpoint_format='sharded'",
    ):
        ShardedStrategy(backend="fsdp2", checkpoint_format="full", async_save=True)
    with pytest.raises(ValueError, match="are FSDP2's policies; pass backend='fsdp2'"):
        ShardedStrategy(backend="torch", mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="CPUOffloadPolicy\\(\\)\\) needs a GPU"):
        apply_fully_shard(nn.Linear(2, 2), 1, "cpu", False, None, offload_policy=CPUOffloadPolicy())
