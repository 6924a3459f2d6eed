"""backend="processes": which start method a call picks, and the lifecycle of workers forked for one call."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lightning_mgpu.data import PreprocessingError, backends, preprocess
from tests.helpers.data import CHUNK, Features, IndexedDataset, N
from tests.helpers.launch import check_exit, kill_tree, run_python, start

#: A fresh interpreter (no Ray or pytest threads), which is where a user's script starts.
_CHOICE = """
import json, sys, threading
from lightning_mgpu.data import backends
alone = [backends.resolve_start_method(None), backends.fork_unsafe_reason()]
release = threading.Event()
user = threading.Thread(target=release.wait, name="user-thread")
user.start()
busy = [backends.resolve_start_method(None), backends.fork_unsafe_reason(), backends.resolve_start_method("fork")]
release.set()
user.join()
print(json.dumps({"alone": alone, "busy": busy}))
"""

_DEFAULT_CALL = """
import json, logging, sys
import multiprocessing.forkserver as fs
from lightning_mgpu.data import backends, preprocess
from tests.helpers.data import CALLS, Features, IndexedDataset
logging.basicConfig(level=logging.INFO)
backends.COLD_START_S = dict.fromkeys(backends.COLD_START_S, 0.0)  # 200 tiny samples would run in-process
info = preprocess(IndexedDataset(200), sys.argv[1], Features(), num_workers=2, chunk_size=16, progress="tqdm")
print(json.dumps({"shards": info.computed_shards, "calls_here": CALLS["n"],
                  "forkserver_pid": fs._forkserver._forkserver_pid, "pool_left": backends._POOL is not None}))
"""


@contextlib.contextmanager
def _a_user_thread() -> Iterator[None]:
    """Another thread ("user-thread") alive in this process for the block: what makes fork unsafe."""
    release = threading.Event()
    user = threading.Thread(target=release.wait, name="user-thread")
    user.start()
    try:
        yield
    finally:
        release.set()
        user.join()


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_default_start_method_is_fork_only_while_this_process_has_no_other_thread() -> None:
    out = _last_json(run_python(["-c", _CHOICE], timeout=120).stdout)
    assert out["alone"] == ["fork", None]
    method, reason, explicit = out["busy"]
    assert method == "forkserver" and "user-thread" in reason and "1 other thread" in reason
    assert explicit == "fork", "an explicit start_method is the user's choice"


def test_a_default_call_forks_workers_for_the_call_and_starts_no_forkserver(tmp_path: Path, reference_cache) -> None:
    """tqdm's bar runs a monitor thread: the method is chosen before it starts, so the call still forks."""
    from tests.unit.data.test_preprocess import snapshot

    proc = run_python(["-c", _DEFAULT_CALL, str(tmp_path / "c")], timeout=180)
    out = _last_json(proc.stdout)
    assert out["shards"] == 13 and out["calls_here"] <= 2, "the workers computed every shard (the driver only probed)"
    assert out["forkserver_pid"] is None, "no forkserver (seconds of imports) for a call that forks"
    assert not out["pool_left"], "forked workers serve one call"
    assert "forkserver" not in proc.stderr
    assert snapshot(tmp_path / "c") == snapshot(reference_cache)


def test_a_thread_in_the_driver_makes_the_call_use_the_forkserver_and_say_why(
    tmp_path: Path, reference_cache, caplog
) -> None:
    from tests.unit.data.test_preprocess import snapshot

    backends.shutdown_process_pool()
    with _a_user_thread(), caplog.at_level(logging.INFO):
        preprocess(IndexedDataset(N), tmp_path / "c", Features(), num_workers=2, chunk_size=CHUNK, progress=False)
    assert "start from a forkserver" in caplog.text and "user-thread" in caplog.text
    assert backends._POOL is not None and backends._POOL.method == "forkserver"
    assert snapshot(tmp_path / "c") == snapshot(reference_cache)
    backends.shutdown_process_pool()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_forked_workers_exit_when_the_driver_is_killed(tmp_path: Path) -> None:
    """A forked worker inherits the driver's ends of the pipes; unless it closes them, a killed driver's EOF never
    reaches it and it waits forever."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = (
        "import sys\nfrom lightning_mgpu.data import preprocess\nfrom tests.helpers.data import Features,"
        " IndexedDataset\npreprocess(IndexedDataset(64, delay_s=0.05, pid_dir=sys.argv[2]), sys.argv[1], Features(),"
        " num_workers=2, chunk_size=4, progress=False, start_method='fork')\n"
    )
    driver = start([sys.executable, "-c", script, str(tmp_path / "c"), str(pid_dir)], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len([p for p in pid_dir.iterdir() if int(p.name) != driver.pid]) < 2:  # both workers are computing
            assert driver.poll() is None and time.monotonic() < deadline, "the workers never started"
            time.sleep(0.05)
        workers = [int(p.name) for p in pid_dir.iterdir() if int(p.name) != driver.pid]
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        check_exit("the preprocessing driver", driver.returncode, -signal.SIGKILL)  # the kill, not an earlier exit
        deadline = time.monotonic() + 30  # a chunk is 0.2 s: they notice at their next message
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "forked workers outlived their driver"
    finally:
        kill_tree(driver.pid)


def test_forked_workers_end_on_terminate_even_under_the_drivers_sigterm_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning (and SaveOnInterrupt) install SIGTERM handlers that only set a flag; a forked worker inherits them,
    so without resetting SIGTERM a failure would wait for the busy worker to finish its chunk instead of ending it."""
    exits: list[int | None] = []
    close = backends.ProcessPool.close

    def recording_close(self, terminate: bool = False) -> None:
        procs = list(self.procs)
        close(self, terminate)
        exits.extend(p.exitcode for p in procs)

    monkeypatch.setattr(backends.ProcessPool, "close", recording_close)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        # Chunk 0 takes 0.8 s; chunk 1 fails at its 5th sample (0.2 s): worker 0 is mid-chunk when the call fails.
        with pytest.raises(PreprocessingError, match="sample 20 failed"):
            preprocess(
                IndexedDataset(64, fail_at=20, delay_s=0.05),
                tmp_path / "c",
                Features(),
                num_workers=2,
                chunk_size=16,
                progress=False,
                start_method="fork",
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert len(exits) == 2 and -signal.SIGTERM in exits, f"worker exit codes {exits}: the busy one must end on SIGTERM"


def test_start_process_pool_starts_the_shared_workers_that_later_calls_use(
    tmp_path: Path, reference_cache, caplog
) -> None:
    from lightning_mgpu.data import start_process_pool
    from tests.helpers.data import CALLS
    from tests.unit.data.test_preprocess import snapshot

    backends.shutdown_process_pool()
    with pytest.raises(ValueError, match="forked workers serve one call"):
        start_process_pool(start_method="fork")
    start_process_pool(2)
    pool = backends._POOL
    assert pool is not None and pool.method == "forkserver" and all(p.is_alive() for p in pool.procs)
    pids = [p.pid for p in pool.procs]
    CALLS["n"] = 0
    preprocess(
        IndexedDataset(N),
        tmp_path / "c",
        Features(),
        num_workers=2,
        chunk_size=CHUNK,
        progress=False,
        start_method="forkserver",
    )
    assert backends._POOL is pool and [p.pid for p in pool.procs] == pids
    assert CALLS["n"] < N / 2, "the running workers, not this process, computed the shards"
    assert snapshot(tmp_path / "c") == snapshot(reference_cache)
    # A default call from a process with a thread uses the running workers too, and says nothing of starting any.
    CALLS["n"] = 0
    with _a_user_thread(), caplog.at_level(logging.INFO):
        preprocess(IndexedDataset(N), tmp_path / "d", Features(), num_workers=2, chunk_size=CHUNK, progress=False)
    assert backends._POOL is pool and CALLS["n"] < N / 2
    assert "start from a forkserver" not in caplog.text, caplog.text
    backends.shutdown_process_pool()
    assert not any(p.is_alive() for p in pool.procs)


@pytest.mark.parametrize("per_chunk_s,driver_finishes", [(0.1, True), (1.0, False)], ids=["little-left", "much-left"])
def test_workers_that_come_up_late_get_the_rest_only_if_it_outlasts_the_handover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_chunk_s: float, driver_finishes: bool
) -> None:
    """The driver computes chunks while a cold forkserver pool starts. When the pool comes up with less than
    ``2 * _HANDOVER_S`` of (estimated) work left, the driver finishes it: handing it over costs more than it saves.

    The pool's start is held until the driver has done 10 of the 13 chunks (3 left): 0.3 s of estimated work with 0.1 s
    chunks, which the driver keeps; 3 s with 1 s chunks, which goes to the workers.
    """
    from tests.helpers.data import CALLS

    backends.shutdown_process_pool()
    ready = backends.ProcessPool(backends._process_context("forkserver"), 2)  # the workers, already up
    held, released = 10 * CHUNK, threading.Event()

    def late_pool(ctx, size):
        deadline = time.monotonic() + 60
        while CALLS["n"] < held and time.monotonic() < deadline:
            time.sleep(0.001)
        released.set()
        backends._POOL = ready
        return ready

    monkeypatch.setattr(backends, "_shared_pool", late_pool)
    CALLS["n"] = 0
    tasks = [(i, start, min(start + CHUNK, N)) for i, start in enumerate(range(0, N, CHUNK))]
    shard_dir = tmp_path / "shards"
    shard_dir.mkdir()
    # 5 ms a sample (80 ms a chunk): the driver is still inside the 11th chunk when the pool is handed back.
    dataset = IndexedDataset(N, delay_s=0.005)
    try:
        records = list(
            backends.run_processes(dataset, Features(), shard_dir, tasks, 2, "forkserver", per_chunk_s * len(tasks))
        )
    finally:
        backends.shutdown_process_pool()
    assert released.is_set() and sorted(r["index"] for r in records) == list(range(len(tasks)))
    if driver_finishes:
        assert CALLS["n"] == N, "the last chunks went to the workers although less than the handover was left"
    else:
        assert held <= CALLS["n"] <= N - CHUNK, f"the driver computed {CALLS['n']} of {N} samples: the workers got none"
    assert not any(p.is_alive() for p in ready.procs)
