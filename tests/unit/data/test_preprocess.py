"""preprocess(): identical caches from every backend, resume, validation, corruption, no pickle.

The in-process tests; the ones that launch processes are in ``tests/integration/data/test_preprocess.py``.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_mgpu.data import (
    CacheError,
    CacheMismatchError,
    CorruptCacheError,
    PreprocessedDataset,
    PreprocessingError,
    compute_fingerprint,
    preprocess,
)
from tests.helpers.data import (
    CALLS,
    CHUNK,
    Features,
    IndexedDataset,
    N,
    NoisyFeatures,
)

FIELDS = ("feat", "index", "y")


def snapshot(cache_dir: Path) -> dict:
    """Everything that defines a cache's content: manifest (minus time and backend) and shard bytes."""
    manifest = json.loads((cache_dir / "manifest.json").read_text())
    manifest.pop("created")
    manifest.pop("backend")
    shards = {p.name: p.read_bytes() for p in sorted((cache_dir / "shards").iterdir())}
    return {"manifest": manifest, "shards": shards}


def test_reference_cache_layout(reference_cache):
    manifest = json.loads((reference_cache / "manifest.json").read_text())
    assert manifest["num_samples"] == N and manifest["chunk_size"] == CHUNK and len(manifest["shards"]) == 13
    assert manifest["fields"] == {
        "feat": {"shape": [3, 5], "dtype": "<f4"},
        "y": {"shape": [], "dtype": "<i8"},
        "index": {"shape": [], "dtype": "<i8"},
    }
    for record in manifest["shards"]:
        assert set(record["fields"]) == set(FIELDS) and len(record["fields"]["feat"]["sha256"]) == 64
    # A few large files, one per field per shard; nothing left over from the build.
    assert sorted(p.name for p in reference_cache.iterdir()) == [".lock", "manifest.json", "shards"]
    assert len(list((reference_cache / "shards").iterdir())) == 13 * len(FIELDS)
    ds = PreprocessedDataset(reference_cache)
    expected = Features()(IndexedDataset(N)[117])
    sample = ds[117]
    assert (
        torch.equal(sample["feat"], torch.from_numpy(expected["feat"]))
        and sample["y"].item() == expected["y"]
        and sample["index"].item() == 117
    )


def test_rerun_reuses_complete_cache(tmp_path):
    ds = IndexedDataset(48)
    preprocess(ds, tmp_path, Features(), backend="serial", progress=False)
    CALLS["n"] = 0
    info = preprocess(ds, tmp_path, Features(), backend="serial", progress=False)
    assert info.reused and info.computed_shards == 0 and CALLS["n"] == 0


def test_stale_cache_is_detected_and_rebuilt_without_touching_user_files(tmp_path):
    cache, ds = tmp_path / "c", IndexedDataset(64)
    preprocess(ds, cache, Features(), backend="serial", progress=False)
    (cache / "notes.txt").write_text("mine")
    (cache / "shards" / "README.md").write_text("mine too")
    changed = Features(scale=2.0)

    with pytest.raises(CacheMismatchError, match=r"the transform .*changed.*on_mismatch='rebuild'"):
        preprocess(ds, cache, changed, backend="serial", on_mismatch="error", progress=False)
    with pytest.raises(CacheMismatchError, match="transform"):
        PreprocessedDataset(cache, expected_fingerprint=compute_fingerprint(ds, changed))
    PreprocessedDataset(
        cache, expected_fingerprint=compute_fingerprint(ds, Features())
    )  # the refusal kept the old cache
    with pytest.raises(CacheMismatchError, match="the dataset"):
        preprocess(IndexedDataset(64, seed=1), cache, Features(), backend="serial", on_mismatch="error", progress=False)

    with pytest.warns(UserWarning, match="stale"):
        info = preprocess(ds, cache, changed, backend="serial", progress=False)
    assert not info.reused and info.computed_shards == info.num_shards
    rebuilt = PreprocessedDataset(cache, expected_fingerprint=compute_fingerprint(ds, changed))
    np.testing.assert_array_equal(rebuilt[5]["feat"].numpy(), changed(ds[5])["feat"])
    assert (cache / "notes.txt").read_text() == "mine" and (cache / "shards" / "README.md").read_text() == "mine too"


def test_foreign_manifest_is_never_overwritten(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "someone else's"}))
    with pytest.raises(CacheError, match="not a manifest written by lightning_mgpu"):
        preprocess(IndexedDataset(20), tmp_path, Features(), backend="serial", progress=False)
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"name": "someone else's"}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"], (
        "nothing may be written next to a foreign manifest"
    )


def test_corrupt_shard_is_detected_and_repaired(tmp_path, reference_cache):
    cache = tmp_path / "c"
    shutil.copytree(reference_cache, cache)
    victim = cache / "shards" / "shard-00005.feat.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # a silent bit flip: same size
    victim.write_bytes(bytes(data))
    # PreprocessedDataset's default check is one stat per file: it opens a same-size flip. The full
    # hash runs once per run in PreprocessedDataModule.prepare_data (test_dataset.py), or on request:
    PreprocessedDataset(cache)
    with pytest.raises(
        CorruptCacheError, match=r"Shard 5 .*shard-00005\.feat\.npy does not match its sha256.*preprocess\(dataset"
    ):
        PreprocessedDataset(cache, verify="full")
    with pytest.warns(UserWarning, match="shard 5 will be recomputed"):
        info = preprocess(IndexedDataset(N), cache, Features(), backend="serial", verify="full", progress=False)
    assert info.computed_shards == 1
    assert snapshot(cache) == snapshot(reference_cache)

    victim.write_bytes(victim.read_bytes()[:-8])  # truncated: caught by the size check
    with pytest.raises(CorruptCacheError, match=r"shard-00005\.feat\.npy has \d+ bytes.*clear_cache"):
        PreprocessedDataset(cache)
    victim.unlink()
    with pytest.raises(CorruptCacheError, match=r"shard-00005\.feat\.npy is missing"):
        PreprocessedDataset(cache)


def test_cache_is_plain_npy_and_json_and_never_unpickles(reference_cache, monkeypatch):
    files = [p for p in reference_cache.rglob("*") if p.is_file()]
    assert all(p.suffix in (".npy", ".json") or p.name == ".lock" for p in files), files
    assert (reference_cache / ".lock").stat().st_size == 0
    for p in files:
        if p.suffix == ".npy":
            with open(p, "rb") as f:
                version = np.lib.format.read_magic(f)
                read_header = {
                    (1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0,
                }[version]
                _, _, dtype = read_header(f)
            assert not dtype.hasobject

    def no_pickle(*args, **kwargs):
        raise AssertionError("the cache must never unpickle")

    real_load = np.load

    def load_without_pickle(*args, **kwargs):
        assert kwargs.get("allow_pickle") is False, "np.load must be called with allow_pickle=False"
        return real_load(*args, **kwargs)

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, no_pickle)
    monkeypatch.setattr(np, "load", load_without_pickle)
    ds = PreprocessedDataset(reference_cache, verify="full")
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=N)))
    assert batch["index"].tolist() == list(range(N)) and batch["feat"].shape == (N, 3, 5)


def test_non_deterministic_transform_warns(tmp_path):
    with pytest.warns(UserWarning, match="not deterministic.*augment="):
        preprocess(IndexedDataset(20), tmp_path, NoisyFeatures(), backend="serial", progress=False)


def test_unpicklable_transform_with_processes_names_the_fix(tmp_path):
    with pytest.raises(PreprocessingError, match="picklable.*backend='serial'"):
        preprocess(
            IndexedDataset(20),
            tmp_path,
            lambda s: s["x"],
            backend="processes",
            num_workers=2,
            chunk_size=4,
            progress=False,
        )


def test_inconsistent_samples_are_rejected(tmp_path):
    def ragged(sample):
        return sample["x"][: 1 + sample["index"] % 2]

    with pytest.raises(PreprocessingError, match=r"sample 1 field 'data' has shape \(2, 4\).*same shape"):
        preprocess(IndexedDataset(20), tmp_path, ragged, backend="serial", chunk_size=4, progress=False)
    with pytest.raises(PreprocessingError, match="would need pickle"):
        preprocess(IndexedDataset(20), tmp_path / "o", lambda s: {"a": object()}, backend="serial", progress=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "threads"}, "backend='threads'"),
        ({"num_workers": 0}, "num_workers"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"on_mismatch": "ignore"}, "on_mismatch"),
        ({"verify": "md5"}, "verify"),
        ({"start_method": "threads"}, "start_method"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        preprocess(IndexedDataset(4), tmp_path, **kwargs)


def test_progress_modes(capsys, monkeypatch):
    import lightning_mgpu.data.progress as progress_mod
    from lightning_mgpu.data import Progress

    lines: list[str] = []
    monkeypatch.setattr(progress_mod, "rank_zero_info", lines.append)
    with Progress(100, initial=20, desc="p", mode="log", log_every_s=0.0) as bar:
        bar.update(30)
        bar.update(50)
    assert lines[0].startswith("p: 50/100 samples (50%)") and "samples/s" in lines[0] and "ETA" in lines[0]
    assert lines[-1].startswith("p: 100/100 samples (100%)")
    with Progress(10, desc="t", mode="tqdm") as bar:
        bar.update(10)
    assert "10/10" in capsys.readouterr().err
    with pytest.raises(ValueError, match="progress="):
        Progress(1, mode="fancy")


def test_an_unguarded_script_re_run_by_a_worker_is_told_to_add_the_main_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forkserver/spawn worker imports the main script; unguarded module-level code would call preprocess again there.

    multiprocessing marks that import with ``current_process()._inheriting``; the call must name the fix, not die.
    """
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    with pytest.raises(RuntimeError, match=r'importing the main script: put .* under `if __name__ == "__main__":`'):
        preprocess(data, tmp_path / "cache", backend="processes", num_workers=2, progress=False)
    assert not (tmp_path / "cache").exists()  # refused before any work
