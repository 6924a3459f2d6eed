"""``data_parallel_rank_and_size``: the data-parallel rank and size, from torch.distributed or Horovod.

The tests that launch processes; the in-process ones are in ``tests/unit/utilities/test_process_group.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.launch import run_command
from tests.helpers.runif import RunIf

_UNDER_HOROVOD = """
import json, sys
import horovod.torch as hvd

hvd.init()
from lightning_mgpu.data.loader import ResumableDistributedSampler, resumable_loader
from lightning_mgpu.utilities.process_group import data_parallel_rank_and_size

loader = resumable_loader(list(range(10)), batch_size=2, shuffle=True, seed=3)
sampler = loader.sampler
result = [data_parallel_rank_and_size(), isinstance(sampler, ResumableDistributedSampler), list(sampler)]
with open(f"{sys.argv[1]}/rank{hvd.rank()}.json", "w") as f:
    json.dump(result, f)
"""


@RunIf(horovod=True)
@pytest.mark.timeout(300)
def test_horovod_ranks_and_the_loader_shards_by_them(tmp_path: Path) -> None:
    """Horovod has no torch.distributed group; the loader must still shard (else Lightning swaps in a sampler that
    replays epoch 0 on resume)."""
    # Under horovodrun, as users run it: the workers are processes of their own. (This test used horovod.run inside
    # the pytest process, whose runner once terminated both workers on a slow host; horovod.run is no longer the
    # bundle's launcher, and its signal handlers and pipes had no business in the test process.)
    script = tmp_path / "ranks.py"
    script.write_text(_UNDER_HOROVOD)
    horovodrun = str(Path(sys.executable).with_name("horovodrun"))
    run_command([horovodrun, "-np", "2", "--gloo", sys.executable, str(script), str(tmp_path)], timeout=240)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r[0] for r in results] == [[0, 2], [1, 2]]
    assert all(r[1] for r in results)
    assert sorted(results[0][2] + results[1][2]) == list(range(10))  # each sample once across the ranks
