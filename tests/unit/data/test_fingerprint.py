"""Fingerprints: stable for the same input, different when code, state or data change."""

from __future__ import annotations

import functools
import importlib
import sys
import textwrap

import numpy as np
import pytest
import torch

from lightning_mgpu.data import (
    compute_fingerprint,
    fingerprint_dataset,
    fingerprint_transform,
)
from tests.helpers.data import Features, IndexedDataset, tuple_transform


def scale(x, factor=2.0):
    return x * factor


def test_transform_fingerprint_is_stable_and_tracks_state():
    assert fingerprint_transform(Features()) == fingerprint_transform(Features())
    assert fingerprint_transform(Features(scale=2.0)) != fingerprint_transform(Features())
    assert fingerprint_transform(tuple_transform) == fingerprint_transform(tuple_transform)
    assert fingerprint_transform(tuple_transform) != fingerprint_transform(Features())
    assert fingerprint_transform(functools.partial(scale, factor=3)) != fingerprint_transform(
        functools.partial(scale, factor=4)
    )
    assert fingerprint_transform(Features(), version="2") != fingerprint_transform(Features())
    assert fingerprint_transform(Features(), override="k") == fingerprint_transform(Features(scale=9.0), override="k")
    assert fingerprint_transform(None) == fingerprint_transform(None) != fingerprint_transform(scale)
    module = torch.nn.Linear(2, 2)
    before = fingerprint_transform(module)
    with torch.no_grad():
        module.weight.add_(1.0)
    assert fingerprint_transform(module) != before, "a module's weights are part of its state"


def test_transform_fingerprint_tracks_source_of_helpers(tmp_path, monkeypatch):
    """Editing a same-module helper that the transform calls changes the fingerprint."""
    src = textwrap.dedent(
        """
        def helper(x):
            return x * {factor}

        def transform(sample):
            return helper(sample)
        """
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    prints = []
    for factor in (2, 2, 30):  # 30: a different size, so caches keyed on mtime+size notice
        (tmp_path / "fp_dyn_mod.py").write_text(src.format(factor=factor))
        sys.modules.pop("fp_dyn_mod", None)
        importlib.invalidate_caches()
        prints.append(fingerprint_transform(importlib.import_module("fp_dyn_mod").transform))
    sys.modules.pop("fp_dyn_mod", None)
    assert prints[0] == prints[1] != prints[2]


def test_dataset_fingerprint():
    assert fingerprint_dataset(IndexedDataset(50)) == fingerprint_dataset(IndexedDataset(50))
    assert fingerprint_dataset(IndexedDataset(50, seed=1)) != fingerprint_dataset(IndexedDataset(50))
    assert fingerprint_dataset(IndexedDataset(51)) != fingerprint_dataset(IndexedDataset(50))
    assert fingerprint_dataset(IndexedDataset(50), override="v1") == fingerprint_dataset(
        IndexedDataset(50, seed=3), override="v1"
    )
    # Attributes do not count, only content (fail_at never fires on probed indices here).
    assert fingerprint_dataset(IndexedDataset(50, fail_at=48)) == fingerprint_dataset(IndexedDataset(50))
    ds = IndexedDataset(50)
    ds.x[49] += 1  # the last sample is always probed
    assert fingerprint_dataset(ds) != fingerprint_dataset(IndexedDataset(50))


class RandomDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return np.random.rand(3)


def test_non_deterministic_dataset_is_refused():
    with pytest.raises(ValueError, match="not deterministic.*augment="):
        fingerprint_dataset(RandomDataset())
    assert fingerprint_dataset(RandomDataset(), override="mine")


def test_combined_fingerprint_names_what_changed():
    a = compute_fingerprint(IndexedDataset(10), Features())
    b = compute_fingerprint(IndexedDataset(10), Features(scale=3.0))
    assert a.value != b.value and a.dataset == b.dataset
    assert "the transform" in b.difference(a) and "dataset" not in b.difference(a)
    assert a.transform_name == "tests.helpers.data.Features" and a.dataset_name == "tests.helpers.data.IndexedDataset"
