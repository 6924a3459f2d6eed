"""Where chunks are computed: in the driver, in a local process pool, or as Ray tasks.

Every backend is a generator that takes the chunks still to do, ``(shard_index, start, stop)``,
and yields each finished shard's record (files written, sizes, checksums) in completion
order. The driver journals each record and advances the progress display; if it stops
iterating (an error, Ctrl-C), the generator's ``finally`` cancels outstanding work.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
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


def _terminate(executor: ProcessPoolExecutor) -> None:
    # ProcessPoolExecutor has no public terminate before Python 3.14. Killing a worker mid-chunk
    # is safe here: it can only leave a temporary file, which the next run removes.
    for proc in list((getattr(executor, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()


def start_process_pool_server(start_method: str | None = None) -> None:
    """Start the forkserver now, so that it imports the worker code while the driver works."""
    ctx = _process_context(start_method)
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def run_processes(
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    shard_dir: Path,
    tasks: Sequence[Task],
    num_workers: int,
    start_method: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Compute chunks in a local process pool; each worker writes its own shard files.

    The dataset and transform are pickled once per worker (pool initializer), not per chunk.
    Starting workers can take seconds (the forkserver, or each spawned worker, imports torch
    and Lightning first), so a helper thread starts them while the driver computes chunks
    itself; the driver stops computing once the workers are up. With a warm forkserver the
    workers are up within milliseconds and the driver only hands out chunks.
    """
    ctx = _process_context(start_method)
    workers = max(1, min(num_workers, len(tasks)))
    executor = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker.init_process_worker, initargs=(dataset, transform, str(shard_dir)))
    queue, lock = deque(tasks), threading.Lock()
    pending: dict[Future, Task] = {}
    warmups: list[Future] = []
    errors: list[BaseException] = []

    def take() -> Task | None:
        with lock:
            return queue.popleft() if queue else None

    def submit(limit: int) -> None:
        while len(pending) < limit and (task := take()) is not None:
            pending[executor.submit(_worker.process_chunk, *task)] = task

    def start_workers() -> None:
        # Each submit starts at most one worker and blocks until it is forked: submit no-ops
        # first, so that no real chunk is stuck behind a slow start; then hand out chunks.
        try:
            for _ in range(workers):
                warmups.append(executor.submit(_worker.noop))
            submit(workers)
        except BaseException as err:  # noqa: BLE001 - handed to the driver thread
            errors.append(err)

    starter = threading.Thread(target=start_workers, name="preprocess-pool-start", daemon=True)
    starter.start()
    clean_exit = False
    try:
        starter.join(_WARM_START_S)  # a warm forkserver starts workers within this
        while starter.is_alive() and (task := take()) is not None:
            yield from _driver_chunk(dataset, transform, shard_dir, task)
        starter.join()
        if errors:
            raise _pool_start_error(errors[0])
        warm = False
        while pending or queue:
            # Two chunks per worker once they run, so that none waits for the driver to hand out the next.
            submit(2 * workers if warm else workers)
            done, _ = wait([*pending, *(f for f in warmups if not f.done())], timeout=None if warm else _WARM_START_S, return_when=FIRST_COMPLETED)
            warm = warm or any(f.done() for f in warmups)
            if not done and queue:
                # Spawned workers are still importing: do a chunk here rather than wait.
                yield from _driver_chunk(dataset, transform, shard_dir, queue.popleft())
                continue
            for fut in done:
                if fut in pending:
                    yield _chunk_result(fut, pending.pop(fut))
        for fut in warmups:
            _chunk_result(fut, (-1, 0, 0))  # surfaces a worker that failed to start
        clean_exit = True
    finally:
        with lock:
            queue.clear()
        starter.join()
        for fut in pending:
            fut.cancel()
        if not clean_exit:
            _terminate(executor)
        executor.shutdown(wait=True, cancel_futures=True)


def _driver_chunk(dataset: Any, transform: Callable[[Any], Any] | None, shard_dir: Path, task: Task) -> Iterator[dict[str, Any]]:
    """A chunk computed by the driver next to the workers: with one BLAS thread, like them."""
    limits = _worker.limit_threads(1, include_torch=False)  # the user's torch setting stays
    try:
        yield from run_serial(dataset, transform, shard_dir, [task])
    finally:
        if limits is not None:
            limits.restore_original_limits()


def _pool_start_error(err: BaseException) -> BaseException:
    if isinstance(err, (TypeError, AttributeError, ValueError, pickle.PicklingError)):  # pickling the initializer's arguments
        return PreprocessingError(
            f"backend='processes' could not send the dataset and transform to its workers ({type(err).__name__}: {err}). "
            "Both must be picklable: define them at module level (no lambdas or local functions), or use backend='serial'."
        )
    return err


def _chunk_result(fut: Future, task: Task) -> Any:
    shard_index, start, stop = task
    try:
        return fut.result()
    except _worker.ChunkError as err:
        raise PreprocessingError(f"shard {shard_index} (samples {start}..{stop - 1}): {err}") from err
    except BrokenProcessPool as err:
        raise PreprocessingError(
            "a preprocessing worker died (killed, out of memory, a crash in native code, or an initializer that failed to "
            "unpickle the dataset); finished shards are kept - rerun preprocess to resume."
        ) from err


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
            ray.init(num_cpus=num_workers or default_num_workers(), include_dashboard=False)
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
