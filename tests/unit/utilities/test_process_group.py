"""``data_parallel_rank_and_size``: the data-parallel rank and size, from torch.distributed or Horovod.

The in-process tests; the ones that launch processes are in ``tests/integration/utilities/test_process_group.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from lightning_mgpu.data.loader import ResumableDistributedSampler, resumable_loader
from lightning_mgpu.utilities.process_group import data_parallel_rank_and_size


@pytest.fixture
def group_of_one(tmp_path: Path) -> Iterator[None]:
    """A torch.distributed group of this one process (what Lightning's ddp builds on one device)."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_one_process_is_not_a_group() -> None:
    assert not dist.is_initialized()
    assert data_parallel_rank_and_size() is None


def test_a_group_of_one_process_is_a_job(group_of_one: None) -> None:
    """ddp on one device: Lightning still swaps a plain DistributedSampler into a shuffling loader, and that one replays
    epoch 0's order after a resume (found on a GPU, 2026-11-27), so the loader must bring its own resumable one."""
    assert data_parallel_rank_and_size() == (0, 1)
    loader = resumable_loader(list(range(10)), batch_size=2, shuffle=True, seed=3)
    assert isinstance(loader.sampler, ResumableDistributedSampler)
    assert sorted(loader.sampler) == list(range(10))
