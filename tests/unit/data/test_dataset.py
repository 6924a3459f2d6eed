"""PreprocessedDataset, TransformedDataset and PreprocessedDataModule in one process.

The in-process tests; the ones that launch processes are in ``tests/integration/data/test_dataset.py``.
"""

from __future__ import annotations

import pickle
import re
import shutil

import pytest
import torch

from lightning_mgpu.data import (
    CacheMismatchError,
    CacheNotFoundError,
    PreprocessedDataModule,
    PreprocessedDataset,
    TransformedDataset,
    clear_cache,
    preprocess,
)
from lightning_mgpu.data import cache as cache_module
from tests.helpers.data import CALLS, Features, IndexedDataset, N, tuple_transform


def test_samples_match_the_transform_and_on_the_fly(reference_cache):
    cached = PreprocessedDataset(reference_cache, max_open_shards=2)  # forces map eviction
    fly = TransformedDataset(IndexedDataset(N), Features())
    assert len(cached) == len(fly) == N
    for i in (0, 15, 16, 199, 37, 3):
        a, b = cached[i], fly[i]
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k])
    assert len(cached._maps) <= 2
    assert cached[-1]["index"].item() == N - 1
    with pytest.raises(IndexError):
        cached[N]


def test_structures_scalars_and_augment(tmp_path):
    ds = IndexedDataset(30)
    preprocess(ds, tmp_path / "t", tuple_transform, backend="serial", progress=False)
    x, y = PreprocessedDataset(tmp_path / "t")[7]
    assert torch.equal(x, torch.from_numpy(ds[7]["x"] * 2)) and y.dtype == torch.int64 and y.ndim == 0
    preprocess(ds, tmp_path / "a", lambda s: s["x"], backend="serial", progress=False)
    single = PreprocessedDataset(tmp_path / "a")[3]
    assert isinstance(single, torch.Tensor) and single.shape == (3, 4)

    def flip_in_place(sample):
        x, y = sample
        x.mul_(-1)  # in place: needs the private copy augment receives
        return x, y

    aug = PreprocessedDataset(tmp_path / "t", augment=flip_in_place)
    assert torch.equal(aug[7][0], -x)
    assert torch.equal(PreprocessedDataset(tmp_path / "t")[7][0], x), "augment must never write to the cache"


def test_pickles_without_its_maps(reference_cache):
    ds = PreprocessedDataset(reference_cache)
    ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone._maps) == 0 and torch.equal(clone[150]["feat"], ds[150]["feat"])


def test_missing_cache_names_the_fix(tmp_path):
    with pytest.raises(CacheNotFoundError, match=r"no manifest.json.*preprocess\(dataset"):
        PreprocessedDataset(tmp_path)


def test_clear_cache_keeps_user_files(tmp_path):
    preprocess(IndexedDataset(20), tmp_path, Features(), backend="serial", progress=False)
    (tmp_path / "keep.txt").write_text("x")
    removed = clear_cache(tmp_path)
    assert any(p.name == "manifest.json" for p in removed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_datamodule_builds_once_and_matches_on_the_fly(tmp_path):
    kwargs = dict(val_dataset=IndexedDataset(20, seed=1), batch_size=8, backend="serial", progress=False)
    dm = PreprocessedDataModule(IndexedDataset(40), tmp_path, Features(), **kwargs)
    dm.prepare_data()
    assert (tmp_path / "train" / "manifest.json").exists() and (tmp_path / "val" / "manifest.json").exists()
    dm.setup("fit")
    fly = PreprocessedDataModule(IndexedDataset(40), tmp_path / "unused", Features(), cache=False, **kwargs)
    fly.setup("fit")
    assert not (tmp_path / "unused").exists()
    a, b = next(iter(dm.val_dataloader())), next(iter(fly.val_dataloader()))
    assert all(torch.equal(a[k], b[k]) for k in a)
    batch = next(iter(dm.train_dataloader()))
    assert batch["feat"].shape == (8, 3, 5)
    assert dm.test_dataloader() == []
    # A changed transform is never silently used: setup checks the fingerprint.
    stale = PreprocessedDataModule(IndexedDataset(40), tmp_path, Features(scale=5.0), **kwargs)
    with pytest.raises(
        CacheMismatchError,
        match=rf"The cache in {re.escape(str(tmp_path / 'train'))} was built from a different input \(the transform "
        r"\(tests\.helpers\.data\.Features -> tests\.helpers\.data\.Features\) changed: fingerprint [0-9a-f]{12} !="
        r" [0-9a-f]{12}\)\. "
        r"Rebuild it with `preprocess\(dataset, '.*train', transform\)`",
    ):
        stale.setup("fit")


def test_datamodule_hashes_the_cache_once_per_run_and_repairs_a_bit_flip(tmp_path, reference_cache, monkeypatch):
    root = tmp_path / "root"
    shutil.copytree(reference_cache, root / "train")
    victim = root / "train" / "shards" / "shard-00005.feat.npy"
    good = victim.read_bytes()
    victim.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))  # same size: invisible to the size check
    hashed: list[str] = []
    real_sha256 = cache_module.file_sha256
    monkeypatch.setattr(cache_module, "file_sha256", lambda path: hashed.append(path.name) or real_sha256(path))
    kwargs = dict(batch_size=8, backend="serial", progress=False)

    # verify="size" (the opt-out) neither hashes nor notices the flip.
    PreprocessedDataModule(IndexedDataset(N), root, Features(), verify="size", **kwargs).prepare_data()
    assert hashed == [] and victim.read_bytes() != good

    # The default hashes every file once in prepare_data, names the damaged shard and recomputes only it.
    dm = PreprocessedDataModule(IndexedDataset(N), root, Features(), **kwargs)
    CALLS["n"] = 0
    with pytest.warns(
        UserWarning, match=r"shard 5 will be recomputed: .*shard-00005\.feat\.npy does not match its sha256 checksum"
    ):
        dm.prepare_data()
    unhashed = {p.name for p in (reference_cache / "shards").iterdir()} - set(hashed)
    assert len(hashed) == len(set(hashed)) and unhashed <= {
        "shard-00005.y.npy",
        "shard-00005.index.npy",
    }  # the check stops at the bad file
    assert victim.read_bytes() == good and CALLS["n"] == 16, "only shard 5 (16 samples) is recomputed"
    # setup on every rank only compares sizes: the cache is not hashed once per rank.
    hashed.clear()
    dm.setup("fit")
    assert hashed == [] and torch.equal(
        dm.datasets["train"][80]["feat"], PreprocessedDataset(reference_cache)[80]["feat"]
    )


def test_cache_dir_owns_the_layout_and_refuses_a_foreign_manifest(tmp_path):
    """The one object every preprocessing step goes through: the names it writes, and nothing else."""
    import json

    import pytest

    from lightning_mgpu.data import CacheDir, CacheError

    store = CacheDir(tmp_path)
    assert (store.shards, store.manifest_path, store.journal_path) == (
        tmp_path / "shards",
        tmp_path / "manifest.json",
        tmp_path / ".progress.jsonl",
    )
    assert store.read_manifest() is None and store.read_journal() is None
    assert str(tmp_path) in store.rebuild_hint() and "clear_cache" in store.rebuild_hint()
    store.manifest_path.write_text(json.dumps({"format": "someone-else"}))
    with pytest.raises(CacheError, match="not a manifest written by lightning_mgpu.data"):
        store.clear()
    assert store.manifest_path.exists()  # refused before deleting anything
