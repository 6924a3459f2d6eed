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
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lightning_mgpu.data import _worker
from lightning_mgpu.data.cache import CacheError
from lightning_mgpu.utilities.imports import require

Backend = Literal["serial", "processes", "ray"]
BACKENDS = ("serial", "processes", "ray")
Task = tuple[int, int, int]  # (shard_index, start, stop)
#: How long the driver waits for pool workers before it starts computing chunks itself.
_WARM_START_S = 0.5
#: What starting the workers cold costs, by start method, on 2 cores: ``fork`` copies the driver (about 20 ms
#: a worker, then copy-on-write faults); a cold forkserver first runs the main script's imports (torch, Lightning
#: and whatever else the script imports: 3-7 s measured here, on the core the driver is not using); ``spawn``
#: makes every worker do that.
COLD_START_S = {"fork": 0.15, "forkserver": 6.0, "spawn": 8.0}
#: What handing the rest of a call to running workers costs (sending the data, their first samples): work left
#: below twice this is finished by the driver.
_HANDOVER_S = 0.5


class PreprocessingError(CacheError):
    """A worker failed; shards finished before the failure are kept for the next run."""


def default_num_workers() -> int:
    """CPUs this process may use (respects affinity masks and container CPU sets)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def run_serial(
    dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, tasks: Sequence[Task]
) -> Iterator[dict[str, Any]]:
    """Compute every chunk in this process, one after the other."""
    for shard_index, start, stop in tasks:
        try:
            kind, names, arrays = _worker.compute_chunk(dataset, transform, start, stop)
        except _worker.ChunkError as err:
            raise PreprocessingError(f"shard {shard_index} (samples {start}..{stop - 1}): {err}") from err
        yield _worker.write_shard(shard_dir, shard_index, start, stop, kind, names, arrays)


def fork_unsafe_reason() -> str | None:
    """Why forking this process for workers is unsafe now, or ``None`` when it is safe.

    A forked child holds only the forking thread: a lock that another thread held at the fork
    (logging, I/O buffers, a library's own) stays locked in the child forever. CUDA cannot be
    used again in a child forked after it was initialised. torch's and the BLAS's own thread
    pools are not a reason: workers cap them to one thread before computing, as DataLoader
    workers (forked by default on Linux) do.
    """
    if "fork" not in multiprocessing.get_all_start_methods() or not sys.platform.startswith("linux"):
        return "fork is not available or not safe on this platform"  # macOS: system frameworks are not fork-safe
    threads = threading.active_count()
    if threads > 1:
        names = ", ".join(sorted({t.name for t in threading.enumerate() if t is not threading.current_thread()}))
        return f"{threads - 1} other thread(s) run in this process ({names})"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in this process"
    return None


def resolve_start_method(start_method: str | None) -> str:
    """The start method a ``backend="processes"`` call uses: ``start_method``, or the cheapest safe one.

    Default: ``fork`` where :func:`fork_unsafe_reason` finds nothing (workers in milliseconds,
    for the call only, with the data inherited rather than pickled: cheaper than even a running
    pool for a large in-memory dataset); else ``forkserver`` (the shared pool; the server runs the
    main script's imports once, seconds); else ``spawn``.
    """
    if start_method is not None:
        return start_method
    if fork_unsafe_reason() is None:
        return "fork"
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def workers_pay_off(method: str, estimate_s: float | None) -> bool:
    """Whether work of ``estimate_s`` serial seconds (``None``: unknown) outlasts starting ``method`` workers cold."""
    return estimate_s is None or estimate_s >= COLD_START_S.get(method, 0.0)


def _process_context(start_method: str) -> multiprocessing.context.BaseContext:
    """The context for ``start_method``; a forkserver also preloads the worker code.

    ``forkserver`` forks workers from a clean server process that has imported the worker code
    once, so each worker starts in milliseconds instead of re-importing torch and Lightning like
    ``spawn`` does, and no thread or lock of the driver is copied.
    """
    ctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        from multiprocessing import forkserver

        # Add, never replace, the user's preload list; it only matters before the server starts.
        current = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
        if _worker.__name__ not in current:
            ctx.set_forkserver_preload([*current, _worker.__name__])
    return ctx


def start_process_pool_server(method: str) -> None:
    """Start the forkserver now (if ``method`` is ``"forkserver"``), so that it imports the worker code while the driver
    works."""
    if method == "forkserver":
        from multiprocessing import forkserver

        _process_context(method)
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

    With ``inherit=(dataset, transform, shard_dir)`` (``fork`` only) the workers are forked with
    the call's data already in memory: nothing is pickled, and the pool serves that call only.
    """

    def __init__(
        self, ctx: multiprocessing.context.BaseContext, size: int, inherit: tuple[Any, ...] | None = None
    ) -> None:
        self.method, self.size, self.owner = ctx.get_start_method(), size, os.getpid()
        if inherit is not None and self.method != "fork":
            raise ValueError(f"only forked workers can inherit the call's data, not {self.method!r} ones")
        self.preloaded = inherit is not None
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        try:
            for _ in range(size):
                parent, child = ctx.Pipe()
                # A forked worker also gets the parent ends of its own and earlier pipes, which it
                # closes: holding them would hide the driver's exit (no EOF) from the workers.
                args = (child,) if inherit is None else (child, inherit, [*self.conns, parent])
                proc = ctx.Process(target=_worker.pool_worker, args=args, name="lightning_mgpu-preprocess")  # type: ignore[attr-defined]
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
        except BaseException:
            self.close(terminate=True)
            raise

    def usable(self, method: str, size: int) -> bool:
        return (
            self.owner == os.getpid()
            and (self.method, self.size) == (method, size)
            and all(p.is_alive() for p in self.procs)
        )

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


def start_process_pool(num_workers: int | None = None, start_method: str = "forkserver") -> None:
    """Start the shared preprocessing workers now, so that the next ``preprocess(backend="processes")`` calls use them.

    Calls fork their own workers where that is safe and need nothing started. A program that runs
    threads gets the shared forkserver pool instead, whose first start runs the main script's imports
    (seconds); calls whose work is shorter than that run in-process unless the pool is already up.
    Start it here, once, when such a program builds several caches. Stop it with
    :func:`shutdown_process_pool` (or it stops at interpreter exit).

    Raises:
        ValueError: ``start_method="fork"`` (forked workers serve one call and cannot be kept).

    Example::

        start_process_pool()                       # e.g. in a notebook, where tqdm and others run threads
        preprocess(train_set, "cache/train", f)     # both calls use the running workers
        preprocess(val_set, "cache/val", f)
    """
    if start_method == "fork":
        raise ValueError("forked workers serve one call and cannot be kept; use start_method='forkserver' or 'spawn'.")
    with _POOL_LOCK:
        _shared_pool(_process_context(start_method), num_workers or default_num_workers())


def process_pool_running(method: str, size: int) -> bool:
    """Whether the shared pool is up with ``size`` workers of ``method`` (e.g. from :func:`start_process_pool`)."""
    pool = _POOL
    return pool is not None and pool.usable(method, size)


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
    estimate_s: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Compute chunks in local worker processes; each worker writes its own shard files.

    Which workers (:func:`resolve_start_method`):

    - ``fork`` (the default where it is safe): workers forked for this call with its data in
      memory, up in milliseconds, stopped at the end of the call; nothing is pickled.
    - ``forkserver``/``spawn``: the shared :class:`ProcessPool`, started by the first call and
      reused by the next ones (a call running while another thread's call holds it gets a
      private pool). Starting it takes seconds (the server, or each spawned worker, imports
      torch and Lightning), so a helper thread starts it while the driver computes chunks.

    Work that would end before cold workers are up (``estimate_s``, the serial seconds left,
    or the time of the first chunk, computed here) runs in this process, which says so.
    """
    global _POOL
    try:
        # Before any work, as the driver may finish a small job before the workers would have needed the transform; also
        # under fork, so that a transform that works here works under every start method.
        pickle.dumps(transform)
    except (TypeError, AttributeError, ValueError, pickle.PicklingError) as err:
        raise _unpicklable(err) from err
    method = resolve_start_method(start_method)
    ctx = _process_context(method)
    queue = deque(tasks)
    warm = process_pool_running(method, num_workers)
    per_task = None if estimate_s is None or not tasks else estimate_s / len(tasks)  # serial seconds per chunk
    if not warm and len(queue) > 1:
        if per_task is None and method != "fork":
            # Time one chunk here: the driver computes chunks while a cold pool starts anyway.
            started = time.perf_counter()
            yield from _driver_chunk(dataset, transform, shard_dir, queue.popleft())
            per_task = time.perf_counter() - started
        remaining = None if per_task is None else per_task * len(queue)
        if not workers_pay_off(method, remaining):
            rank_zero_info(
                f"preprocess: the remaining work (~{remaining:.2f} s) is shorter than starting {method} worker"
                f" processes (~{COLD_START_S[method]:.2f} s), so it runs in this process."
            )
            yield from _driver_chunks(dataset, transform, shard_dir, queue)
            return
    if not queue:
        return
    if method == "fork":
        yield from _run_forked(ctx, dataset, transform, shard_dir, queue, num_workers)
        return
    shared = _POOL_LOCK.acquire(blocking=False)
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
        yield from _driver_chunks(dataset, transform, shard_dir, queue, while_=starter.is_alive)
        starter.join()
        if "error" in got:
            raise got["error"]
        if queue and per_task is not None and not warm and per_task * len(queue) < 2 * _HANDOVER_S:
            # The driver did most of the work while the workers started: the rest is quicker here than handed over.
            yield from _driver_chunks(dataset, transform, shard_dir, queue)
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


def _run_forked(
    ctx: multiprocessing.context.BaseContext,
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    shard_dir: Path,
    queue: deque[Task],
    num_workers: int,
) -> Iterator[dict[str, Any]]:
    """Fork workers for this call only (from this thread, before any helper thread exists), run ``queue``, stop them."""
    pool = ProcessPool(ctx, min(num_workers, len(queue)), inherit=(dataset, transform, str(shard_dir)))
    clean = False
    try:
        yield from _run_pool(pool, dataset, transform, shard_dir, queue)
        clean = True
    finally:
        pool.close(terminate=not clean)


def _run_pool(
    pool: ProcessPool, dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, queue: deque[Task]
) -> Iterator[dict[str, Any]]:
    """Hand ``queue`` out to the pool's workers, at most two chunks queued per worker."""
    workers = list(range(min(pool.size, len(queue))))
    expected: dict[int, deque[Task | None]] = {w: deque() for w in workers}  # None: the answer to "load"

    def feed(w: int) -> None:
        while queue and sum(t is not None for t in expected[w]) < 2:
            task = queue.popleft()
            pool.send(w, ("chunk", *task))
            expected[w].append(task)

    for w in workers:
        if not pool.preloaded:  # forked workers already hold the call's data
            try:
                pool.send(w, ("load", dataset, transform, str(shard_dir)))
            except (TypeError, AttributeError, ValueError, pickle.PicklingError) as err:
                raise _unpicklable(err) from err
            expected[w].append(None)
        feed(w)
    up = pool.preloaded  # forked workers are computing at once: never compute beside them
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
                        f"backend='processes' workers could not unpickle the dataset and transform ({value}). Define"
                        " their classes in a module the workers can import (not in a notebook cell or a local scope),"
                        " or use backend='serial'."
                    )
                shard_index, start, stop = task
                raise PreprocessingError(f"shard {shard_index} (samples {start}..{stop - 1}): {value}")
            up = True
            if task is not None:
                yield value
            feed(w)
    for w in workers if not pool.preloaded else ():
        # Every shard is written by now: a worker that died after its last answer is the next
        # call's problem (it checks that every worker is alive), not a reason to fail this one.
        with contextlib.suppress(PreprocessingError):
            pool.send(w, ("unload",))


def _worker_died() -> PreprocessingError:
    return PreprocessingError(
        "a preprocessing worker died (killed, out of memory, a crash in native code, or - right at start - a script"
        ' that calls preprocess without an `if __name__ == "__main__":` guard, which each worker re-runs on import);'
        " finished shards are kept - rerun preprocess to resume."
    )


def _driver_chunk(
    dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, task: Task
) -> Iterator[dict[str, Any]]:
    """A chunk computed by the driver next to the workers: with one BLAS thread, like them."""
    yield from _driver_chunks(dataset, transform, shard_dir, deque([task]))


def _driver_chunks(
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    shard_dir: Path,
    queue: deque[Task],
    while_: Callable[[], bool] = lambda: True,
) -> Iterator[dict[str, Any]]:
    """Chunks of ``queue`` computed by the driver while ``while_()`` holds, with one BLAS thread set once (threadpoolctl
    scans the loaded libraries on each call, 2-15 ms: 10% of a 1.4 s job when it was set per chunk)."""
    if not (queue and while_()):
        return
    limits = _worker.limit_threads(1, include_torch=False)  # the user's torch setting stays
    try:
        while queue and while_():
            yield from run_serial(dataset, transform, shard_dir, [queue.popleft()])
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
            rank_zero_info(
                f"preprocess: starting a local Ray instance with {num_workers or default_num_workers()} CPUs"
            )
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
        yield from _run_ray_tasks(
            require("ray", "preprocess(backend='ray')"), dataset, transform, shard_dir, tasks, num_workers
        )


def _run_ray_tasks(
    ray: Any,
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    shard_dir: Path,
    tasks: Sequence[Task],
    num_workers: int | None,
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
                raise PreprocessingError(
                    f"shard {shard_index} (samples {start}..{stop - 1}) failed in a Ray task: {err}"
                ) from err
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
    estimate_s: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Dispatch to :func:`run_serial`, :func:`run_processes` or :func:`run_ray`.

    ``estimate_s``: the serial seconds the tasks would take, if known (``processes`` runs small
    work in this process rather than start workers for it).
    """
    if not tasks:  # e.g. killed after the last shard was journaled: no pool, no Ray to start
        return iter(())
    if backend == "serial":
        return run_serial(dataset, transform, shard_dir, tasks)
    if backend == "processes":
        return run_processes(
            dataset, transform, shard_dir, tasks, num_workers or default_num_workers(), start_method, estimate_s
        )
    if backend == "ray":
        return run_ray(dataset, transform, shard_dir, tasks, num_workers, ray_address)
    raise ValueError(f"backend={backend!r} is not supported; choose one of {', '.join(map(repr, BACKENDS))}.")
