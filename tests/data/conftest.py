"""Fixtures of the data tests: one local Ray instance per session, a reference cache."""

from __future__ import annotations

import pytest

from tests.data.helpers import Features, IndexedDataset
from tests.helpers.runif import require_or_skip

N, CHUNK = 200, 16


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs, started once per test session (``ray.init`` takes ~20 s here)."""
    ray = require_or_skip("ray")
    if ray.is_initialized():
        yield ray
        return
    for attempt in range(2):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:  # noqa: BLE001 - Ray's 30 s node start-up timeout, hit on an overloaded machine
            ray.shutdown()
            if attempt:
                raise
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def reference_cache(tmp_path_factory):
    """A serial build of ``IndexedDataset(200)`` + ``Features()`` in chunks of 16 (13 shards)."""
    from lightning_mgpu.data import preprocess

    path = tmp_path_factory.mktemp("reference")
    preprocess(IndexedDataset(N), path, Features(), backend="serial", chunk_size=CHUNK, progress=False)
    return path


@pytest.fixture(autouse=True)
def workers_even_for_small_jobs(monkeypatch):
    """The data tests exercise the worker pool on small data, which ``preprocess`` would otherwise compute in-process
    (work shorter than a cold start of the workers); ``test_work_shorter_than_a_cold_start_runs_in_process`` covers
    that decision."""
    from lightning_mgpu.data import backends

    monkeypatch.setattr(backends, "_COLD_START_S", 0.0)
