"""preprocess(): identical caches from every backend, resume, validation, corruption, no pickle."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import warnings
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
    backends,
    compute_fingerprint,
    preprocess,
    process_pool_scope,
    shutdown_process_pool,
)
from tests.data.conftest import CHUNK, N
from tests.data.helpers import (
    CALLS,
    Features,
    IndexedDataset,
    NoisyFeatures,
    UnpicklableInWorkers,
)
from tests.helpers.launch import run_python

REPO = Path(__file__).resolve().parents[2]
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
    assert manifest["fields"] == {"feat": {"shape": [3, 5], "dtype": "<f4"}, "y": {"shape": [], "dtype": "<i8"}, "index": {"shape": [], "dtype": "<i8"}}
    for record in manifest["shards"]:
        assert set(record["fields"]) == set(FIELDS) and len(record["fields"]["feat"]["sha256"]) == 64
    # A few large files, one per field per shard; nothing left over from the build.
    assert sorted(p.name for p in reference_cache.iterdir()) == [".lock", "manifest.json", "shards"]
    assert len(list((reference_cache / "shards").iterdir())) == 13 * len(FIELDS)
    ds = PreprocessedDataset(reference_cache)
    expected = Features()(IndexedDataset(N)[117])
    sample = ds[117]
    assert torch.equal(sample["feat"], torch.from_numpy(expected["feat"])) and sample["y"].item() == expected["y"] and sample["index"].item() == 117


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_processes_backend_identical_to_serial(tmp_path, reference_cache, start_method):
    CALLS["n"] = 0
    info = preprocess(
        IndexedDataset(N), tmp_path / "p", Features(), backend="processes", num_workers=2, chunk_size=CHUNK, progress=False, start_method=start_method
    )
    assert not info.reused and info.computed_shards == 13
    assert snapshot(tmp_path / "p") == snapshot(reference_cache)
    if start_method == "fork":  # up at once; the driver computes chunks itself while forkserver/spawn workers import
        assert CALLS["n"] == 2, "the workers, not this process, computed the shards (the driver only probed)"
    # Forked workers serve one call; forkserver/spawn ones are kept for the next.
    assert (backends._POOL is None) == (start_method == "fork")
    shutdown_process_pool()


@pytest.mark.ray
@pytest.mark.integration
def test_ray_backend_identical_to_serial_and_reuses_ray(tmp_path, reference_cache, ray_session, monkeypatch):
    import lightning_mgpu.data.progress as progress_mod

    lines: list[str] = []
    monkeypatch.setattr(progress_mod, "rank_zero_info", lines.append)
    info = preprocess(IndexedDataset(N), tmp_path / "r", Features(), backend="ray", chunk_size=CHUNK, progress="log")
    assert info.computed_shards == 13
    assert ray_session.is_initialized(), "preprocess must not shut down a Ray it did not start"
    assert snapshot(tmp_path / "r") == snapshot(reference_cache)
    # The progress line is drawn by the driver as Ray chunks complete.
    assert lines and lines[-1].startswith(f"preprocess[ray]: {N}/{N} samples (100%)") and "samples/s" in lines[-1] and "ETA" in lines[-1]


def test_rerun_reuses_complete_cache(tmp_path):
    ds = IndexedDataset(48)
    preprocess(ds, tmp_path, Features(), backend="serial", progress=False)
    CALLS["n"] = 0
    info = preprocess(ds, tmp_path, Features(), backend="serial", progress=False)
    assert info.reused and info.computed_shards == 0 and CALLS["n"] == 0


def test_resume_after_kill(tmp_path, reference_cache):
    cache = tmp_path / "c"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.runners.run_data_kill", str(cache), "70"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    # Killed in shard 4 (samples 64..79): shards 0-3 are complete, nothing else is visible.
    assert not (cache / "manifest.json").exists() and (cache / ".progress.jsonl").exists()
    assert sorted(p.name for p in (cache / "shards").iterdir()) == sorted(f"shard-{i:05d}.{f}.npy" for i in range(4) for f in FIELDS)
    with pytest.raises(CacheError, match="interrupted build"):
        PreprocessedDataset(cache)
    # What a kill during a write leaves behind: a temporary file, never read, removed on resume.
    torn = cache / "shards" / ".shard-00004.feat.npy.tmp.999.deadbeef"
    torn.write_bytes(b"half a shard")
    mtimes = {p.name: p.stat().st_mtime_ns for p in (cache / "shards").glob("shard-*.npy")}

    CALLS["n"] = 0
    info = preprocess(IndexedDataset(N), cache, Features(), backend="serial", chunk_size=CHUNK, progress=False)
    assert info.computed_shards == 13 - 4 and info.computed_samples == N - 64
    assert CALLS["n"] == N - 64, "finished shards must not be recomputed"
    assert all((cache / "shards" / name).stat().st_mtime_ns == t for name, t in mtimes.items())
    assert not torn.exists() and not (cache / ".progress.jsonl").exists()
    assert snapshot(cache) == snapshot(reference_cache)


def test_processes_failure_is_prompt_and_resumable(tmp_path, reference_cache):
    cache = tmp_path / "c"
    with pytest.raises(PreprocessingError, match="sample 150 failed: ValueError: simulated failure at 150"):
        preprocess(IndexedDataset(N, fail_at=150), cache, Features(), backend="processes", num_workers=2, chunk_size=CHUNK, progress=False)
    assert not (cache / "manifest.json").exists()
    journal = (cache / ".progress.jsonl").read_text().splitlines()
    assert len(journal) > 1, "shards finished before the failure are kept"
    info = preprocess(IndexedDataset(N), cache, Features(), backend="processes", num_workers=2, chunk_size=CHUNK, progress=False)
    assert info.computed_shards <= 13 - (len(journal) - 1)
    assert snapshot(cache) == snapshot(reference_cache)
    assert not list((cache / "shards").glob(".*"))


def test_process_workers_are_reused_across_calls_and_replaced_when_broken(tmp_path, reference_cache):
    shutdown_process_pool()
    kwargs = dict(backend="processes", num_workers=2, chunk_size=CHUNK, progress=False, start_method="forkserver")
    preprocess(IndexedDataset(N), tmp_path / "a", Features(), **kwargs)
    pool = backends._POOL
    assert pool is not None and all(p.is_alive() for p in pool.procs)
    pids = [p.pid for p in pool.procs]
    preprocess(IndexedDataset(N), tmp_path / "b", Features(), **kwargs)
    assert backends._POOL is pool and [p.pid for p in pool.procs] == pids, "the second call must not start workers"
    assert snapshot(tmp_path / "b") == snapshot(reference_cache)

    # A worker that dies mid-call: a clear error, the pool is discarded, and the rerun resumes.
    with pytest.raises(PreprocessingError, match="a preprocessing worker died.*rerun preprocess to resume"):
        preprocess(IndexedDataset(N, kill_at=100), tmp_path / "c", Features(), **kwargs)
    assert backends._POOL is None and not any(p.is_alive() for p in pool.procs)
    info = preprocess(IndexedDataset(N), tmp_path / "c", Features(), **kwargs)
    assert info.computed_shards < 13 and snapshot(tmp_path / "c") == snapshot(reference_cache)

    # A worker killed between calls is noticed before the next call hands it work.
    os.kill(backends._POOL.procs[0].pid, signal.SIGKILL)
    backends._POOL.procs[0].join()
    preprocess(IndexedDataset(N), tmp_path / "d", Features(), **kwargs)
    assert snapshot(tmp_path / "d") == snapshot(reference_cache)

    # A scope stops the workers started inside it, and only those.
    shutdown_process_pool()
    with process_pool_scope():
        preprocess(IndexedDataset(N), tmp_path / "e", Features(), **kwargs)
        started = backends._POOL
    assert backends._POOL is None and not any(p.is_alive() for p in started.procs)


def test_dataset_that_workers_cannot_unpickle_names_the_fix(tmp_path):
    kwargs = dict(backend="processes", num_workers=2, chunk_size=4, progress=False)
    # Workers already up (a first call leaves them running): otherwise the driver, computing chunks while a cold pool
    # starts, could finish this small job before any worker needed the dataset.
    preprocess(IndexedDataset(40), tmp_path / "warm-up", Features(), start_method="forkserver", **kwargs)
    assert backends._POOL is not None
    with pytest.raises(PreprocessingError, match=r"could not unpickle the dataset and transform \(ImportError: simulated.*backend='serial'"):
        preprocess(UnpicklableInWorkers(40), tmp_path / "c", Features(), start_method="forkserver", **kwargs)
    assert not (tmp_path / "c" / "manifest.json").exists()
    # Forked workers inherit the dataset: nothing is pickled, so a notebook-defined dataset works there.
    info = preprocess(UnpicklableInWorkers(40), tmp_path / "c", Features(), start_method="fork", **kwargs)
    assert info.computed_samples == 40


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
    PreprocessedDataset(cache, expected_fingerprint=compute_fingerprint(ds, Features()))  # the refusal kept the old cache
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
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"], "nothing may be written next to a foreign manifest"


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
    with pytest.raises(CorruptCacheError, match=r"Shard 5 .*shard-00005\.feat\.npy does not match its sha256.*preprocess\(dataset"):
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
                read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}[version]
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
        preprocess(IndexedDataset(20), tmp_path, lambda s: s["x"], backend="processes", num_workers=2, chunk_size=4, progress=False)


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


@pytest.mark.integration
def test_ddp_two_ranks_see_every_sample_once_per_epoch(tmp_path):
    run_python(["-m", "tests.integration.runners.run_data_ddp", str(tmp_path)], timeout=420)
    results = [json.loads((tmp_path / f"seen_rank{r}.json").read_text()) for r in range(2)]
    assert all(r["world_size"] == 2 for r in results)
    for epoch in ("0", "1"):
        per_rank = [r["epochs"][epoch] for r in results]
        assert [len(s) for s in per_rank] == [32, 32]
        assert sorted(per_rank[0] + per_rank[1]) == list(range(64)), f"epoch {epoch}: every sample exactly once"
    assert results[0]["epochs"]["0"] != results[0]["epochs"]["1"], "the sampler reshuffles each epoch"
    assert all(r["readonly_warnings"] == [] for r in results)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(PreprocessedDataset(tmp_path / "cache" / "train")) == 64


def test_an_unguarded_script_re_run_by_a_worker_is_told_to_add_the_main_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forkserver/spawn worker imports the main script; unguarded module-level code would call preprocess again there.

    multiprocessing marks that import with ``current_process()._inheriting``; the call must name the fix, not die.
    """
    import multiprocessing

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    with pytest.raises(RuntimeError, match=r'importing the main script: put .* under `if __name__ == "__main__":`'):
        preprocess(data, tmp_path / "cache", backend="processes", num_workers=2, progress=False)
    assert not (tmp_path / "cache").exists()  # refused before any work


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_work_shorter_than_a_cold_start_runs_in_process(tmp_path: Path, reference_cache, monkeypatch: pytest.MonkeyPatch, caplog, start_method) -> None:
    """A one-shot call on little data must never be slower than serial: work that would end before cold workers are up
    (the probe's time per sample x samples) is computed in this process, which says so; longer work goes to the workers."""
    import logging

    shutdown_process_pool()
    kwargs = dict(backend="processes", num_workers=2, chunk_size=CHUNK, progress=False, start_method=start_method)
    monkeypatch.setattr(backends, "COLD_START_S", dict.fromkeys(backends.COLD_START_S, 60.0))  # workers that take a minute
    CALLS["n"] = 0
    with caplog.at_level(logging.INFO):
        preprocess(IndexedDataset(N), tmp_path / "small", Features(), **kwargs)
    assert CALLS["n"] == N + 2, "every sample (and the probe's two) computed here"
    assert backends._POOL is None, "no worker may be started for it"
    assert f"is shorter than starting {start_method} worker processes" in caplog.text and "runs in this process" in caplog.text
    assert snapshot(tmp_path / "small") == snapshot(reference_cache)

    monkeypatch.setattr(backends, "COLD_START_S", dict.fromkeys(backends.COLD_START_S, 0.0))  # free workers: they take the work
    CALLS["n"] = 0
    preprocess(IndexedDataset(N), tmp_path / "large", Features(), **kwargs)
    if start_method == "fork":
        assert CALLS["n"] == 2, "forked workers computed every shard (the driver only probed)"
    else:  # the driver computes chunks while the server starts: here, tiny samples, it may finish them all
        assert backends._POOL is not None and all(p.is_alive() for p in backends._POOL.procs), "the workers were started"
    assert snapshot(tmp_path / "large") == snapshot(reference_cache)
    shutdown_process_pool()
