"""Fixtures of the data tests in both tiers (their ``conftest.py`` files import them): the session's Ray cluster, a
reference cache, worker pools even for small jobs."""

from __future__ import annotations

import pytest

from tests.helpers.data import CHUNK, Features, IndexedDataset, N
from tests.helpers.runif import require_or_skip


@pytest.fixture(scope="session")
def ray_session(ray_cluster):
    """This process connected to the session's two-node Ray cluster (2 CPUs in all); its token is in os.environ."""
    ray = require_or_skip("ray")
    if ray.is_initialized():
        yield ray
        return
    from lightning_mgpu.utilities.signals import restored_signal_handlers

    # ray.init installs a SIGTERM handler that calls sys.exit, for the rest of the session: later tests that send
    # SIGTERM to this process expect Python's default (Lightning then installs its own handler alone).
    with restored_signal_handlers():
        ray.init(address=ray_cluster.address, log_to_driver=False)
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

    monkeypatch.setattr(backends, "COLD_START_S", dict.fromkeys(backends.COLD_START_S, 0.0))
