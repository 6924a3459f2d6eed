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
        if dist.is_initialized():  # a test may have left the group itself
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


def test_the_group_is_destroyed_after_success_and_kept_after_a_failure(
    group_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_mgpu.utilities import process_group

    # Ending on an uncaught exception (Python sets sys.last_value before the exit handlers): other ranks may be inside
    # a collective, so the group stays.
    monkeypatch.setattr("sys.last_value", RuntimeError("rank 0 failed"), raising=False)
    assert not process_group.destroy_process_group_if_done() and dist.is_initialized()
    monkeypatch.delattr("sys.last_value")
    monkeypatch.setitem(process_group._state, "failed", True)  # marked by a strategy's or CleanExit's on_exception
    assert not process_group.destroy_process_group_if_done() and dist.is_initialized()
    monkeypatch.setitem(process_group._state, "failed", False)
    assert process_group.destroy_process_group_if_done() and not dist.is_initialized()


def test_every_trainer_has_a_process_that_ends_well_leave_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's own ddp never destroys the group; the callbacks_factory entry point registers the exit handler.
    import atexit

    import lightning.pytorch as pl

    from lightning_mgpu.utilities import process_group

    registered = []
    monkeypatch.setitem(process_group._state, "registered", False)
    monkeypatch.setattr(atexit, "register", registered.append)
    pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)  # the entry point runs here
    assert registered == [process_group.destroy_process_group_if_done]
