"""preprocess(): identical caches from every backend, resume, validation, corruption, no pickle.

The tests that launch processes; the in-process ones are in ``tests/unit/data/test_preprocess.py``.
"""

from __future__ import annotations

import json
import os
import signal
import warnings
from pathlib import Path

import pytest

from lightning_mgpu.data import (
    CacheError,
    PreprocessedDataset,
    PreprocessingError,
    backends,
    preprocess,
    process_pool_scope,
    shutdown_process_pool,
)
from tests.helpers.data import (
    CALLS,
    CHUNK,
    Features,
    IndexedDataset,
    N,
    UnpicklableInWorkers,
)
from tests.helpers.launch import REPO_ROOT, run_python
from tests.unit.data.test_preprocess import FIELDS, snapshot  # noqa: F401

REPO = REPO_ROOT


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_processes_backend_identical_to_serial(tmp_path, reference_cache, start_method):
    CALLS["n"] = 0
    info = preprocess(
        IndexedDataset(N),
        tmp_path / "p",
        Features(),
        backend="processes",
        num_workers=2,
        chunk_size=CHUNK,
        progress=False,
        start_method=start_method,
    )
    assert not info.reused and info.computed_shards == 13
    assert snapshot(tmp_path / "p") == snapshot(reference_cache)
    if start_method == "fork":  # up at once; the driver computes chunks itself while forkserver/spawn workers import
        assert CALLS["n"] == 2, "the workers, not this process, computed the shards (the driver only probed)"
    # Forked workers serve one call; forkserver/spawn ones are kept for the next.
    assert (backends._POOL is None) == (start_method == "fork")
    shutdown_process_pool()


@pytest.mark.ray
def test_ray_backend_identical_to_serial_and_reuses_ray(tmp_path, reference_cache, ray_session, monkeypatch):
    import lightning_mgpu.data.progress as progress_mod

    lines: list[str] = []
    monkeypatch.setattr(progress_mod, "rank_zero_info", lines.append)
    info = preprocess(IndexedDataset(N), tmp_path / "r", Features(), backend="ray", chunk_size=CHUNK, progress="log")
    assert info.computed_shards == 13
    assert ray_session.is_initialized(), "preprocess must not shut down a Ray it did not start"
    assert snapshot(tmp_path / "r") == snapshot(reference_cache)
    # The progress line is drawn by the driver as Ray chunks complete.
    assert (
        lines
        and lines[-1].startswith(f"preprocess[ray]: {N}/{N} samples (100%)")
        and "samples/s" in lines[-1]
        and "ETA" in lines[-1]
    )


def test_resume_after_kill(tmp_path, reference_cache):
    cache = tmp_path / "c"
    # The runner SIGKILLs itself in shard 4: that is the exit it must end with.
    run_python(["-m", "tests.integration.runners.run_data_kill", str(cache), "70"], timeout=300, expect=-signal.SIGKILL)
    # Killed in shard 4 (samples 64..79): shards 0-3 are complete, nothing else is visible.
    assert not (cache / "manifest.json").exists() and (cache / ".progress.jsonl").exists()
    assert sorted(p.name for p in (cache / "shards").iterdir()) == sorted(
        f"shard-{i:05d}.{f}.npy" for i in range(4) for f in FIELDS
    )
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
        preprocess(
            IndexedDataset(N, fail_at=150),
            cache,
            Features(),
            backend="processes",
            num_workers=2,
            chunk_size=CHUNK,
            progress=False,
        )
    assert not (cache / "manifest.json").exists()
    journal = (cache / ".progress.jsonl").read_text().splitlines()
    assert len(journal) > 1, "shards finished before the failure are kept"
    info = preprocess(
        IndexedDataset(N), cache, Features(), backend="processes", num_workers=2, chunk_size=CHUNK, progress=False
    )
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
    with pytest.raises(
        PreprocessingError,
        match=r"could not unpickle the dataset and transform \(ImportError: simulated.*backend='serial'",
    ):
        preprocess(UnpicklableInWorkers(40), tmp_path / "c", Features(), start_method="forkserver", **kwargs)
    assert not (tmp_path / "c" / "manifest.json").exists()
    # Forked workers inherit the dataset: nothing is pickled, so a notebook-defined dataset works there.
    info = preprocess(UnpicklableInWorkers(40), tmp_path / "c", Features(), start_method="fork", **kwargs)
    assert info.computed_samples == 40


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


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_work_shorter_than_a_cold_start_runs_in_process(
    tmp_path: Path, reference_cache, monkeypatch: pytest.MonkeyPatch, caplog, start_method
) -> None:
    """A one-shot call on little data must never be slower than serial: work that would end before cold workers are up
    (the probe's time per sample x samples) is computed in this process, which says so; longer work goes to the
    workers."""
    import logging

    shutdown_process_pool()
    kwargs = dict(backend="processes", num_workers=2, chunk_size=CHUNK, progress=False, start_method=start_method)
    monkeypatch.setattr(
        backends, "COLD_START_S", dict.fromkeys(backends.COLD_START_S, 60.0)
    )  # workers that take a minute
    CALLS["n"] = 0
    with caplog.at_level(logging.INFO):
        preprocess(IndexedDataset(N), tmp_path / "small", Features(), **kwargs)
    assert CALLS["n"] == N + 2, "every sample (and the probe's two) computed here"
    assert backends._POOL is None, "no worker may be started for it"
    assert (
        f"is shorter than starting {start_method} worker processes" in caplog.text
        and "runs in this process" in caplog.text
    )
    assert snapshot(tmp_path / "small") == snapshot(reference_cache)

    monkeypatch.setattr(
        backends, "COLD_START_S", dict.fromkeys(backends.COLD_START_S, 0.0)
    )  # free workers: they take the work
    CALLS["n"] = 0
    preprocess(IndexedDataset(N), tmp_path / "large", Features(), **kwargs)
    if start_method == "fork":
        assert CALLS["n"] == 2, "forked workers computed every shard (the driver only probed)"
    else:  # the driver computes chunks while the server starts: here, tiny samples, it may finish them all
        assert backends._POOL is not None and all(p.is_alive() for p in backends._POOL.procs), (
            "the workers were started"
        )
    assert snapshot(tmp_path / "large") == snapshot(reference_cache)
    shutdown_process_pool()
