"""``data_parallel_rank_and_size``: the data-parallel rank and size, from torch.distributed or Horovod.

The in-process tests; the ones that launch processes are in ``tests/integration/utilities/test_process_group.py``.
"""

from __future__ import annotations

import torch.distributed as dist

from lightning_mgpu.utilities.process_group import data_parallel_rank_and_size


def test_one_process_is_not_a_group() -> None:
    assert not dist.is_initialized()
    assert data_parallel_rank_and_size() is None

