"""``data_parallel_rank_and_size``: the data-parallel rank and size, from torch.distributed or Horovod.

The tests that launch processes; the in-process ones are in ``tests/unit/utilities/test_process_group.py``.
"""

from __future__ import annotations

import pytest

from lightning_mgpu.utilities.process_group import data_parallel_rank_and_size
from tests.helpers.runif import RunIf


def _under_horovod() -> tuple:
    import horovod.torch as hvd

    hvd.init()
    from lightning_mgpu.data.loader import ResumableDistributedSampler, resumable_loader

    loader = resumable_loader(list(range(10)), batch_size=2, shuffle=True, seed=3)
    sampler = loader.sampler
    return data_parallel_rank_and_size(), isinstance(sampler, ResumableDistributedSampler), list(sampler)


@RunIf(horovod=True)
@pytest.mark.timeout(120)
# Once, in a full CI run (2026-11-25, a slow host), horovod.run's runner terminated both workers (exit 143) within
# 43 s: it does so when this process gets SIGINT/SIGTERM (its shutdown event) or a worker's parent pipe closes. The
# cause was not found (the test passes alone and in earlier CI runs); one rerun on exactly that failure.
@pytest.mark.flaky(reruns=1, only_rerun=["exited with non-zero status"])
def test_horovod_ranks_and_the_loader_shards_by_them() -> None:
    """Horovod has no torch.distributed group; the loader must still shard (else Lightning swaps in a sampler that
    replays epoch 0 on resume)."""
    import horovod

    from lightning_mgpu.utilities.signals import restored_signal_handlers

    # horovod.run installs SIGINT/SIGTERM handlers for good; later tests in this process expect the default ones.
    with restored_signal_handlers():
        results = horovod.run(_under_horovod, np=2, use_gloo=True, hosts="localhost:2")
    assert [r[0] for r in results] == [(0, 2), (1, 2)]
    assert all(r[1] for r in results)
    assert sorted(results[0][2] + results[1][2]) == list(range(10))  # each sample once across the ranks
