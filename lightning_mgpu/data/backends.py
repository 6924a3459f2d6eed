"""Where chunks are computed: in the driver, in a local process pool, or as Ray tasks.

Every backend is a generator that takes the chunks still to do, ``(shard_index, start, stop)``,
and yields each finished shard's record (files written, sizes, checksums) in completion
order. The driver journals each record and advances the progress display; if it stops
iterating (an error, Ctrl-C), the generator's ``finally`` cancels outstanding work.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lightning_mgpu.data import _worker
from lightning_mgpu.data.cache import CacheError
from lightning_mgpu.utilities.imports import require

Backend = Literal["serial", "processes", "ray"]
BACKENDS = ("serial", "processes", "ray")
Task = tuple[int, int, int]  # (shard_index, start, stop)
#: How long the driver waits for pool workers before it starts computing chunks itself.
_WARM_START_S = 0.5
#: What starting the pool cold costs (a forkserver importing torch and Lightning, then forking): 2-2.5 s on 2 cores.
_COLD_START_S = 2.0


class PreprocessingError(CacheError):
    """A worker failed; shards finished before the failure are kept for the next run."""


def default_num_workers() -> int:
    """CPUs this process may use (respects affinity masks and container CPU sets)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def run_serial(dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, tasks: Sequence[Task]) -> Iterator[dict[str, Any]]:
    """Compute every chunk in this process, one after the other."""
    for shard_index, start, stop in tasks:
        try:
            kind, names, arrays = _worker.compute_chunk(dataset, transform, start, stop)
        except _worker.ChunkError as err:
            raise PreprocessingError(f"shard {shard_index} (samples {start}..{stop - 1}): {err}") from err
        yield _worker.write_shard(shard_dir, shard_index, start, stop, kind, names, arrays)


def _process_context(start_method: str | None) -> multiprocessing.context.BaseContext:
    """A fork-free context: the parent may run torch/OpenMP threads, which fork can deadlock.

    ``forkserver`` (the default where available) forks workers from a clean server process that
    has imported the worker code once, so each worker starts in milliseconds instead of
    re-importing torch and Lightning like ``spawn`` does.
    """
    methods = multiprocessing.get_all_start_methods()
    method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        # Add, never replace, the user's preload list; it only matters before the server starts.
        current = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
        if _worker.__name__ not in current:
            ctx.set_forkserver_preload([*current, _worker.__name__])
    return ctx


def start_process_pool_server(start_method: str | None = None) -> None:
    """Start the forkserver now, so that it imports the worker code while the driver works."""
    ctx = _process_context(start_method)
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


class ProcessPool:
    """Preprocessing worker processes, kept between calls and reused (like Ray's workers).

    Starting workers cost every call 0.1-0.4 s on 2 cores, more under load: the forkserver forks
    them one at a time (10-20 ms each for a process with torch loaded), each unpickles the dataset
    and caps its thread pools, and a fresh process runs its first samples slower. That is 5-15%
    of a 3 s job, and what kept the backend below litdata with ``fork`` on loaded cores. A call
    now only sends each worker it uses the dataset and transform (``load``, once per worker per
    call) and takes them back at the end (``unload``), so an idle worker holds no data.

    Every worker has its own pipe, so the driver knows which chunks each one holds and keeps two
    queued per worker. A failure discards the pool (terminating its workers is the only way to
    cancel a chunk in progress); the next call starts a new one.
    """

    def __init__(self, ctx: multiprocessing.context.BaseContext, size: int) -> None:
        self.method, self.size, self.owner = ctx.get_start_method(), size, os.getpid()
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        try:
            for _ in range(size):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker.pool_worker, args=(child,), name="lightning_mgpu-preprocess")
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
        except BaseException:
            self.close(terminate=True)
            raise

    def usable(self, method: str, size: int) -> bool:
        return self.owner == os.getpid() and (self.method, self.size) == (method, size) and all(p.is_alive() for p in self.procs)

    def send(self, worker: int, message: tuple[Any, ...]) -> None:
        try:
            self.conns[worker].send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise _worker_died() from None

    def replies(self, workers: Sequence[int], timeout: float | None) -> list[tuple[int, tuple[str, Any]]]:
        """The answers that are ready from ``workers`` (waits up to ``timeout``; ``[]`` if none)."""
        by_handle: dict[Any, int] = {}
        for w in workers:
            by_handle[self.conns[w]] = w
            by_handle[self.procs[w].sentinel] = w
        out: list[tuple[int, tuple[str, Any]]] = []
        ready = multiprocessing.connection.wait(list(by_handle), timeout)
        for handle in ready:  # a worker can answer and then die: read its answer first
            w = by_handle[handle]
            if handle is self.conns[w]:
                try:
                    out.append((w, self.conns[w].recv()))
                except (EOFError, OSError):
                    raise _worker_died() from None
        if not out and ready:
            raise _worker_died()
        return out

    def close(self, terminate: bool = False) -> None:
        """Stop the workers: ask them to exit (or terminate them), then reap them."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                if not terminate:
                    conn.send(("exit",))
                conn.close()
        for proc in self.procs:
            if terminate and proc.is_alive():
                proc.terminate()  # mid-chunk is safe: it can only leave a temporary file, which the next run removes
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.procs, self.conns = [], []


#: The pool that ``backend="processes"`` calls share; one call at a time uses it.
_POOL: ProcessPool | None = None
_POOL_LOCK = threading.Lock()
_ATEXIT: list[bool] = []  # whether shutdown_process_pool is registered to run at exit


def shutdown_process_pool() -> None:
    """Stop the shared preprocessing workers now (they stop at interpreter exit anyway).

    The next ``preprocess(backend="processes")`` starts new ones. ``PreprocessedDataModule``
    stops the workers its ``prepare_data`` started (:func:`process_pool_scope`), so that idle
    workers do not outlive the build of the caches.
    """
    global _POOL
    # No lock: at interpreter exit a call may still hold it in another thread, and its workers
    # must stop anyway (multiprocessing's own exit hook would otherwise wait for them forever).
    pool, _POOL = _POOL, None
    if pool is not None and pool.owner == os.getpid():  # a forked child must not stop its parent's workers
        pool.close()


@contextlib.contextmanager
def process_pool_scope() -> Iterator[None]:
    """Stop, at the end of the block, the shared workers if a call inside the block started them.

    Workers that were already running before the block are left running. Example::

        with process_pool_scope():        # one worker start-up for both caches, none left after
            preprocess(train_set, "cache/train", f)
            preprocess(val_set, "cache/val", f)
    """
    before = _POOL
    try:
        yield
    finally:
        if _POOL is not None and _POOL is not before:
            shutdown_process_pool()


def _shared_pool(ctx: multiprocessing.context.BaseContext, size: int) -> ProcessPool:
    """The shared pool (``_POOL_LOCK`` held), replaced when the start method or size changed or a worker died."""
    global _POOL
    if _POOL is not None and not _POOL.usable(ctx.get_start_method(), size):
        old, _POOL = _POOL, None
        if old.owner == os.getpid():  # a forked child must not touch its parent's workers
            old.close(terminate=True)
    if _POOL is None:
        if not _ATEXIT:
            atexit.register(shutdown_process_pool)  # runs before multiprocessing's own exit hook joins children
            _ATEXIT.append(True)
        _POOL = ProcessPool(ctx, size)
    return _POOL


def run_processes(
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    shard_dir: Path,
    tasks: Sequence[Task],
    num_workers: int,
    start_method: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Compute chunks in a local process pool; each worker writes its own shard files.

    The workers are the shared :class:`ProcessPool`, started by the first call and reused by the
    next ones; a call running while another thread's call holds it, or one with
    ``start_method="fork"`` (whose workers would keep whatever files and sockets the driver had
    open), gets a private pool for its duration. Starting workers can take seconds (a cold
    forkserver, or each spawned worker, imports torch and Lightning), so a helper thread starts
    them while the driver computes chunks itself, until a worker is up.
    """
    global _POOL
    try:
        # Before any work, as the driver may finish a small job before the workers would have needed the transform.
        pickle.dumps(transform)
    except (TypeError, AttributeError, ValueError, pickle.PicklingError) as err:
        raise _unpicklable(err) from err
    ctx = _process_context(start_method)
    queue = deque(tasks)
    warm = _POOL is not None and _POOL.usable(ctx.get_start_method(), num_workers)
    if not warm and len(queue) > 1 and ctx.get_start_method() != "fork":
        # Time one chunk here first: work shorter than a cold start of the workers is faster done in this process (the
        # driver would finish it, then wait for workers it no longer needs).
        started = time.perf_counter()
        yield from _driver_chunk(dataset, transform, shard_dir, queue.popleft())
        remaining = (time.perf_counter() - started) * len(queue)
        if remaining < _COLD_START_S:
            rank_zero_info(
                f"preprocess: the remaining work (~{remaining:.1f} s) is shorter than starting worker processes"
                f" (~{_COLD_START_S:.1f} s), so it runs in this process."
            )
            while queue:
                yield from _driver_chunk(dataset, transform, shard_dir, queue.popleft())
            return
    shared = ctx.get_start_method() != "fork" and _POOL_LOCK.acquire(blocking=False)
    got: dict[str, Any] = {}

    def start_pool() -> None:
        try:
            got["pool"] = _shared_pool(ctx, num_workers) if shared else ProcessPool(ctx, num_workers)
        except BaseException as err:  # noqa: BLE001 - handed to the driver thread
            got["error"] = err

    starter = threading.Thread(target=start_pool, name="preprocess-pool-start", daemon=True)
    starter.start()
    clean = False
    try:
        # A running pool is there at once; a cold one takes seconds, during which the driver computes chunks itself.
        starter.join(_WARM_START_S if warm else 0.0)
        while starter.is_alive() and queue:
            yield from _driver_chunk(dataset, transform, shard_dir, queue.popleft())
        starter.join()
        if "error" in got:
            raise got["error"]
        if queue:
            yield from _run_pool(got["pool"], dataset, transform, shard_dir, queue)
        clean = True
    finally:
        starter.join()  # never discard a pool that is still being forked
        pool = got.get("pool")
        if pool is not None and not (clean and shared):
            if shared and _POOL is pool:
                _POOL = None
            pool.close(terminate=not clean)
        if shared:
            _POOL_LOCK.release()


def _run_pool(pool: ProcessPool, dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, queue: deque[Task]) -> Iterator[dict[str, Any]]:
    """Hand ``queue`` out to the pool's workers, at most two chunks queued per worker."""
    workers = list(range(min(pool.size, len(queue))))
    expected: dict[int, deque[Task | None]] = {w: deque() for w in workers}  # None: the answer to "load"

    def feed(w: int) -> None:
        while queue and sum(t is not None for t in expected[w]) < 2:
            task = queue.popleft()
            pool.send(w, ("chunk", *task))
            expected[w].append(task)

    for w in workers:
        try:
            pool.send(w, ("load", dataset, transform, str(shard_dir)))
        except (TypeError, AttributeError, ValueError, pickle.PicklingError) as err:
            raise _unpicklable(err) from err
        expected[w].append(None)
        feed(w)
    up = False
    while any(expected.values()):
        answers = pool.replies([w for w in workers if expected[w]], timeout=None if up else _WARM_START_S)
        if not answers and queue:
            # No worker has answered yet (spawned workers import torch first): compute here rather than wait.
            yield from _driver_chunk(dataset, transform, shard_dir, queue.popleft())
        for w, (status, value) in answers:
            task = expected[w].popleft()
            if status == "error":
                if task is None:
                    raise PreprocessingError(
                        f"backend='processes' workers could not unpickle the dataset and transform ({value}). Define their classes "
                        "in a module the workers can import (not in a notebook cell or a local scope), or use backend='serial'."
                    )
                shard_index, start, stop = task
                raise PreprocessingError(f"shard {shard_index} (samples {start}..{stop - 1}): {value}")
            up = True
            if task is not None:
                yield value
            feed(w)
    for w in workers:
        # Every shard is written by now: a worker that died after its last answer is the next
        # call's problem (it checks that every worker is alive), not a reason to fail this one.
        with contextlib.suppress(PreprocessingError):
            pool.send(w, ("unload",))


def _worker_died() -> PreprocessingError:
    return PreprocessingError(
        "a preprocessing worker died (killed, out of memory, a crash in native code, or - right at start - a script that"
        " calls preprocess without an `if __name__ == \"__main__\":` guard, which each worker re-runs on import); finished"
        " shards are kept - rerun preprocess to resume."
    )


def _driver_chunk(dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, task: Task) -> Iterator[dict[str, Any]]:
    """A chunk computed by the driver next to the workers: with one BLAS thread, like them."""
    limits = _worker.limit_threads(1, include_torch=False)  # the user's torch setting stays
    try:
        yield from run_serial(dataset, transform, shard_dir, [task])
    finally:
        if limits is not None:
            limits.restore_original_limits()


def _unpicklable(err: BaseException) -> PreprocessingError:
    return PreprocessingError(
        f"backend='processes' could not send the dataset and transform to its workers ({type(err).__name__}: {err}). "
        "Both must be picklable: define them at module level (no lambdas or local functions), or use backend='serial'."
    )


#: Open ``ray_session(lazy=True)`` scopes: a Ray started inside one lives until the scope ends.
_LAZY_SESSIONS: list[dict[str, bool]] = []


@contextlib.contextmanager
def ray_session(ray_address: str | None = None, num_workers: int | None = None, lazy: bool = False) -> Iterator[None]:
    """Make sure Ray is initialised inside the block; shut down only what this started.

    An initialised Ray (your own ``ray.init(...)``) is reused and left running. Otherwise this
    connects to ``ray_address`` or starts a local instance with ``num_workers`` CPUs (default:
    usable CPUs), and shuts it down on exit. With ``lazy=True`` nothing starts up front: the
    first ``preprocess(..., backend="ray")`` inside the block starts Ray, and it stays up for
    the following calls until the block ends (no start-up when every cache is already built).

    Example::

        with ray_session(lazy=True):      # at most one Ray start-up for several caches
            preprocess(train_set, "cache/train", f, backend="ray")
            preprocess(val_set, "cache/val", f, backend="ray")
    """
    if lazy:
        frame = {"started": False}
        _LAZY_SESSIONS.append(frame)
        try:
            yield
        finally:
            _LAZY_SESSIONS.remove(frame)
            if frame["started"]:
                require("ray", "preprocess(backend='ray')").shutdown()
        return
    ray = require("ray", "preprocess(backend='ray')")
    started = False
    if not ray.is_initialized():
        if ray_address is None:
            rank_zero_info(f"preprocess: starting a local Ray instance with {num_workers or default_num_workers()} CPUs")
            # address="local": a new instance even where `ray start` runs on this machine (ray.init() would join it
            # and then refuse num_cpus).
            ray.init(address="local", num_cpus=num_workers or default_num_workers(), include_dashboard=False)
        else:
            rank_zero_info(f"preprocess: connecting to the Ray cluster at {ray_address}")
            ray.init(address=ray_address)
        if _LAZY_SESSIONS:
            _LAZY_SESSIONS[-1]["started"] = True  # the enclosing lazy scope shuts it down
        else:
            started = True
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def run_ray(
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    shard_dir: Path,
    tasks: Sequence[Task],
    num_workers: int | None = None,
    ray_address: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Compute chunks as Ray tasks; the driver writes each shard as its result arrives.

    The dataset and transform go into the object store once (``ray.put``); each task receives a
    reference. At most ``2 x num_workers`` chunks are in flight, which bounds the memory that
    finished-but-unwritten results take in the object store. Results travel back to the driver,
    so the cache only needs to be on the driver's disk, not on a shared file system.
    """
    with ray_session(ray_address, num_workers):
        yield from _run_ray_tasks(require("ray", "preprocess(backend='ray')"), dataset, transform, shard_dir, tasks, num_workers)


def _run_ray_tasks(
    ray: Any, dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, tasks: Sequence[Task], num_workers: int | None
) -> Iterator[dict[str, Any]]:
    pending: dict[Any, Task] = {}
    try:
        # Ship the worker module by value: Ray workers then need numpy, not lightning_mgpu + Lightning.
        ray.cloudpickle.register_pickle_by_value(_worker)
        remote = ray.remote(num_cpus=1)(_worker.ray_compute_chunk)
        payload = ray.put((dataset, transform))
        workers = num_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        queue = list(tasks)
        queue.reverse()  # pop() from the end keeps shard order
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                task = queue.pop()
                pending[remote.remote(payload, task[1], task[2])] = task
            ready, _ = ray.wait(list(pending), num_returns=1)
            shard_index, start, stop = pending.pop(ready[0])
            try:
                kind, names, arrays = ray.get(ready[0])
            except Exception as err:  # RayTaskError wrapping the worker's ChunkError, or a dead worker
                raise PreprocessingError(f"shard {shard_index} (samples {start}..{stop - 1}) failed in a Ray task: {err}") from err
            yield _worker.write_shard(shard_dir, shard_index, start, stop, kind, names, arrays)
    finally:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort; the task may have finished already
                pass


def run_backend(
    backend: str,
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    shard_dir: Path,
    tasks: Sequence[Task],
    num_workers: int | None,
    ray_address: str | None = None,
    start_method: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Dispatch to :func:`run_serial`, :func:`run_processes` or :func:`run_ray`."""
    if not tasks:  # e.g. killed after the last shard was journaled: no pool, no Ray to start
        return iter(())
    if backend == "serial":
        return run_serial(dataset, transform, shard_dir, tasks)
    if backend == "processes":
        return run_processes(dataset, transform, shard_dir, tasks, num_workers or default_num_workers(), start_method)
    if backend == "ray":
        return run_ray(dataset, transform, shard_dir, tasks, num_workers, ray_address)
    raise ValueError(f"backend={backend!r} is not supported; choose one of {', '.join(map(repr, BACKENDS))}.")
