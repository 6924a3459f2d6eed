"""PreprocessedDataset, TransformedDataset and PreprocessedDataModule in one process.

The tests that launch processes; the in-process ones are in ``tests/unit/data/test_dataset.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader

from lightning_mgpu.data import (
    PreprocessedDataset,
)
from tests.helpers.data import IndexedDataset, N


def test_dataloader_workers_read_the_maps(reference_cache):
    loader = DataLoader(PreprocessedDataset(reference_cache), batch_size=50, num_workers=1)
    indices = torch.cat([b["index"] for b in loader])
    assert indices.tolist() == list(range(N))
    np.testing.assert_array_equal(next(iter(loader))["y"].numpy(), IndexedDataset(N).y[:50])
