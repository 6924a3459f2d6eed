"""``preprocess``: run the deterministic, expensive part of a data pipeline once, in parallel."""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn

from lightning_mgpu.data import _worker
from lightning_mgpu.data.backends import (
    BACKENDS,
    Backend,
    PreprocessingError,
    Task,
    default_num_workers,
    fork_unsafe_reason,
    process_pool_running,
    resolve_start_method,
    run_backend,
    start_process_pool_server,
    workers_pay_off,
)
from lightning_mgpu.data.cache import (
    VERIFY_MODES,
    CacheDir,
    CacheMismatchError,
    Fingerprint,
    Manifest,
    Verify,
)
from lightning_mgpu.data.fingerprint import (
    combine_fingerprints,
    fingerprint_dataset,
    fingerprint_transform,
    hash_sample,
    qualified_name,
)
from lightning_mgpu.data.progress import Progress, ProgressMode

OnMismatch = Literal["rebuild", "error"]

#: With ``chunk_size=None``: shards of at most this many bytes ...
TARGET_SHARD_BYTES = 64 * 2**20
#: ... and about this many shards for a small dataset, so that every worker gets work ...
TARGET_MIN_SHARDS = 16
#: ... but never fewer samples per shard than this (tiny datasets stay a few files).
MIN_AUTO_CHUNK = 16


@dataclass(frozen=True)
class CacheInfo:
    """What :func:`preprocess` found or built.

    Attributes:
        cache_dir: the cache directory.
        num_samples: samples in the cache.
        num_shards: shards in the cache.
        fingerprint: the cache's fingerprint (dataset + transform + format).
        fields: per-field ``{"shape": [...], "dtype": "<f4"}`` of one sample.
        reused: a complete, valid cache was already there; nothing was computed.
        computed_shards: shards computed by this call (the rest were reused or resumed).
        computed_samples: samples computed by this call.
        seconds: wall time of this call.
    """

    cache_dir: Path
    num_samples: int
    num_shards: int
    fingerprint: str
    fields: dict[str, dict[str, Any]]
    reused: bool
    computed_shards: int
    computed_samples: int
    seconds: float


def compute_fingerprint(
    dataset: Any,
    transform: Callable[[Any], Any] | None = None,
    dataset_fingerprint: str | None = None,
    transform_version: str | int | None = None,
    transform_fingerprint: str | None = None,
) -> Fingerprint:
    """The fingerprint that :func:`preprocess` records and :class:`PreprocessedDataset` checks.

    See :mod:`lightning_mgpu.data.fingerprint` for what it covers.
    """
    d = fingerprint_dataset(dataset, dataset_fingerprint)
    t = fingerprint_transform(transform, transform_version, transform_fingerprint)
    return Fingerprint(
        value=combine_fingerprints(d, t),
        dataset=d,
        transform=t,
        dataset_name=qualified_name(dataset),
        transform_name="identity" if transform is None else qualified_name(transform),
    )


def _validate_args(
    backend: str,
    num_workers: int | None,
    chunk_size: int | None,
    on_mismatch: str,
    verify: str,
    start_method: str | None,
) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported; choose one of {', '.join(map(repr, BACKENDS))}.")
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"num_workers must be >= 1 (or None for all CPUs), got {num_workers}.")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 (or None to choose automatically), got {chunk_size}.")
    if on_mismatch not in ("rebuild", "error"):
        raise ValueError(f"on_mismatch={on_mismatch!r} is not supported; use 'rebuild' or 'error'.")
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify={verify!r} is not supported; use one of {', '.join(map(repr, VERIFY_MODES))}.")
    if start_method is not None and start_method not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"start_method={start_method!r} is not available here; use one of"
            f" {multiprocessing.get_all_start_methods()}."
        )
    if backend == "processes" and getattr(multiprocessing.current_process(), "_inheriting", False):
        # A forkserver/spawn worker re-imports the main script; unguarded module-level code calls preprocess again
        # there.
        raise RuntimeError(
            "preprocess(backend='processes') was called while a worker process was importing the main script: put the"
            ' script\'s top-level code under `if __name__ == "__main__":` (workers start by importing the main module).'
        )


def _probe(dataset: Any, transform: Callable[[Any], Any] | None) -> tuple[str, dict[str, dict[str, Any]], int, float]:
    """Transform sample 0 in the driver: fail fast with a local traceback, learn the fields and the time per sample.

    Also transforms it a second time: different outputs mean the transform is random, and
    caching it would freeze one draw of the randomness for every epoch.

    Returns:
        ``(kind, fields, bytes per sample, seconds per sample)``; the time is the faster of the two runs.
    """
    out, seconds = [], math.inf
    try:
        for _ in range(2 if transform is not None else 1):
            t0 = time.perf_counter()
            out.append(_worker.compute_chunk(dataset, transform, 0, 1))
            seconds = min(seconds, time.perf_counter() - t0)
    except _worker.ChunkError as err:
        raise PreprocessingError(f"{err}. Fix the transform; nothing was written.") from err
    kind, names, arrays = out[0]
    if len(out) == 2 and hash_sample(out[0][2]) != hash_sample(out[1][2]):
        rank_zero_warn(
            f"preprocess: the transform {qualified_name(transform)} returned different outputs for the same sample: it"
            " is not deterministic, and caching freezes one random draw for every epoch. Keep random augmentation out"
            " of the cached transform and pass it as `augment=` to PreprocessedDataset / PreprocessedDataModule."
        )
    fields = {n: {"shape": list(a.shape[1:]), "dtype": a.dtype.str} for n, a in zip(names, arrays)}
    return kind, fields, sum(a.nbytes for a in arrays), seconds


def _seconds_per_sample(dataset: Any, transform: Callable[[Any], Any] | None, index: int) -> float | None:
    """The time of one sample in the driver (for a resumed build, which skips the probe); ``None`` if it fails here."""
    t0 = time.perf_counter()
    try:
        _worker.compute_chunk(dataset, transform, index, index + 1)
    except _worker.ChunkError:
        return None  # the backend reports it with its shard
    return time.perf_counter() - t0


def auto_chunk_size(num_samples: int, sample_bytes: int) -> int:
    """Samples per shard: about 16 shards for small data, 64 MiB shards for large data."""
    by_count = max(MIN_AUTO_CHUNK, math.ceil(num_samples / TARGET_MIN_SHARDS))
    by_bytes = max(1, TARGET_SHARD_BYTES // max(sample_bytes, 1))
    return max(1, min(by_count, by_bytes, num_samples))


def _record_matches(record: dict[str, Any], header: Manifest) -> str | None:
    fields = {n: {"shape": m["shape"], "dtype": m["dtype"]} for n, m in record["fields"].items()}
    if record["kind"] != header.kind or fields != header.fields:
        return (
            f"shard {record['index']} has fields {fields} ({record['kind']}) but sample 0 has {header.fields}"
            f" ({header.kind})"
        )
    return None


def _good_shards(
    store: CacheDir, records: list[dict[str, Any]], header: Manifest, verify: Verify
) -> dict[int, dict[str, Any]]:
    """The records whose files pass ``verify`` and fit the layout; damaged ones are reported."""
    good: dict[int, dict[str, Any]] = {}
    for r in records:
        i = r.get("index", -1)
        expected = (i * header.chunk_size, min(header.num_samples, (i + 1) * header.chunk_size))
        if not 0 <= i < header.num_shards or (r.get("start"), r.get("stop")) != expected or _record_matches(r, header):
            continue
        reason = store.check_shard(r, verify)
        if reason is None:
            good[i] = r
        else:
            rank_zero_warn(f"preprocess: shard {i} will be recomputed: {reason}")
    return good


def _plan(
    store: CacheDir, fp: Fingerprint, n: int, chunk_size: int | None, on_mismatch: OnMismatch, verify: Verify
) -> tuple[Manifest | None, dict[int, dict[str, Any]], bool]:
    """Decide what to reuse. Returns ``(header or None for a fresh build, good shards, complete)``."""
    cache_dir = store.path  # for the messages
    store.remove_stale_tmp()
    existing = store.read_manifest()
    if existing is not None and existing.fingerprint.value != fp.value:
        what = fp.difference(existing.fingerprint)
        if on_mismatch == "error":
            raise CacheMismatchError(
                f"The cache in {cache_dir} was built from a different input: {what} changed (fingerprint"
                f" {existing.fingerprint.value[:12]} != {fp.value[:12]}). Pass on_mismatch='rebuild' to rebuild it,"
                " choose another cache_dir, or - if the change does not alter the output - pass the same"
                " transform_fingerprint=/dataset_fingerprint= as the cache was built with."
            )
        rank_zero_warn(f"preprocess: the cache in {cache_dir} is stale ({what} changed); rebuilding it.")
        store.clear()
        existing = None
    if existing is not None:
        good = _good_shards(store, existing.shards, existing, verify)
        if len(good) == existing.num_shards:
            store.remove_journal()
            return existing, good, True
        return existing, good, False
    journal = store.read_journal()
    if (
        journal is not None
        and journal.fingerprint.value == fp.value
        and journal.num_samples == n
        and chunk_size in (None, journal.chunk_size)
    ):
        good = _good_shards(store, journal.shards, journal, verify)
        rank_zero_info(
            f"preprocess: resuming an interrupted build in {cache_dir}: {len(good)}/{journal.num_shards} shards already"
            " done"
        )
        return journal, good, False
    if journal is not None:
        rank_zero_warn(
            f"preprocess: discarding an interrupted build in {cache_dir} made from a different input or chunk_size."
        )
    store.remove_journal()
    store.remove_shard_files()
    return None, {}, False


def preprocess(
    dataset: Any,
    cache_dir: str | os.PathLike,
    transform: Callable[[Any], Any] | None = None,
    backend: Backend = "processes",
    num_workers: int | None = None,
    chunk_size: int | None = None,
    ray_address: str | None = None,
    *,
    on_mismatch: OnMismatch = "rebuild",
    verify: Verify = "size",
    dataset_fingerprint: str | None = None,
    transform_version: str | int | None = None,
    transform_fingerprint: str | None = None,
    progress: ProgressMode | bool = "auto",
    start_method: str | None = None,
) -> CacheInfo:
    """Apply ``transform`` to every sample of ``dataset`` once, in parallel, into a shard cache.

    The cache is a few large ``.npy`` shard files plus a ``manifest.json`` (see
    :mod:`lightning_mgpu.data.cache`); read it with :class:`PreprocessedDataset`. Rerunning is
    cheap: a complete cache with the same fingerprint is reused, an interrupted build resumes
    where it stopped, and damaged shards are recomputed.

    Args:
        dataset: a map-style dataset (``len`` and ``dataset[i]``), deterministic.
        cache_dir: directory of the cache (created). Other files in it are never touched.
        transform: deterministic function of one sample, returning a dict of arrays, a tuple of
            arrays, or one array (tensors and numbers are fine). ``None`` caches the samples.
        backend: ``"serial"``, ``"processes"`` (local worker processes) or ``"ray"`` (tasks on a Ray
            cluster; an initialised Ray is reused, otherwise one is started and shut down).
        num_workers: parallel workers (default: the usable CPUs; for Ray, the cluster's CPUs).
        chunk_size: samples per shard and per task (default: about 16 shards, at most 64 MiB each).
        ray_address: the cluster to connect to when Ray is not initialised yet (e.g. ``"auto"``
            or ``"ray://head:10001"``); ``None`` starts a local instance.
        on_mismatch: what to do with a cache built from another dataset or transform:
            ``"rebuild"`` (its own files are deleted and rebuilt) or ``"error"``.
        verify: check of the existing shards: ``"size"`` (a ``stat`` per file), ``"full"``
            (sha256 of every byte) or ``"none"``.
        dataset_fingerprint: your key for the dataset instead of its sampled content hash.
        transform_version: mixed into the transform's fingerprint; bump it when code the
            fingerprint cannot see (another module, a library) changes the output.
        transform_fingerprint: your key for the transform instead of its code hash.
        progress: ``"auto"``/``True``, ``"tqdm"``, ``"log"``, or ``"none"``/``False``.
        start_method: how ``backend="processes"`` starts its workers. Default: ``"fork"`` where it
            is safe (Linux, no other thread in this process, CUDA not initialised): workers for
            this call, up in milliseconds; else ``"forkserver"``: workers kept for the next call,
            whose server imports torch and Lightning once (seconds). Work shorter than starting
            the workers runs in this process, which says so.

    Returns:
        A :class:`CacheInfo`.

    Raises:
        CacheMismatchError: the cache is stale and ``on_mismatch="error"``.
        PreprocessingError: a sample failed (the message names it); finished shards are kept.
        CacheError: ``cache_dir`` holds a ``manifest.json`` that is not a cache's.

    Example::

        info = preprocess(train_set, "/data/cache/train", transform=extract_features, backend="processes")
        dataset = PreprocessedDataset("/data/cache/train")
    """
    _validate_args(backend, num_workers, chunk_size, on_mismatch, verify, start_method)
    t0 = time.perf_counter()
    try:
        n = len(dataset)
    except TypeError:
        raise TypeError(
            f"preprocess needs a map-style dataset with __len__ and __getitem__; got {type(dataset).__name__}."
        ) from None
    if n == 0:
        raise ValueError("preprocess got an empty dataset; there is nothing to cache.")
    cache_dir = Path(cache_dir)
    store = CacheDir(cache_dir)  # the folder's layout, manifest, journal and shards, from here on
    store.read_manifest()  # refuse a directory holding someone else's manifest.json before writing anything
    fp = compute_fingerprint(dataset, transform, dataset_fingerprint, transform_version, transform_fingerprint)
    store.shards.mkdir(parents=True, exist_ok=True)

    with store.lock(log=rank_zero_info):
        header, done, complete = _plan(store, fp, n, chunk_size, on_mismatch, verify)
        if complete:
            assert header is not None
            rank_zero_info(
                f"preprocess: reusing the cache in {cache_dir} ({n} samples, {header.num_shards} shards, fingerprint"
                f" {fp.value[:12]})"
            )
            return CacheInfo(
                cache_dir, n, header.num_shards, fp.value, header.fields, True, 0, 0, time.perf_counter() - t0
            )
        per_sample: float | None = None
        if header is None:
            kind, fields, sample_bytes, per_sample = _probe(dataset, transform)
            header = Manifest(fp, n, chunk_size or auto_chunk_size(n, sample_bytes), kind, fields)
        header.backend, header.shards = backend, []
        _remove_unfinished(store, done)
        # Journal the reused shards first, then drop the manifest: "complete" must never be visible while shards are
        # missing.
        store.start_journal(header, done.values())
        store.manifest_path.unlink(missing_ok=True)

        tasks: list[Task] = [
            (i, i * header.chunk_size, min(n, (i + 1) * header.chunk_size))
            for i in range(header.num_shards)
            if i not in done
        ]
        estimate_s = None
        if backend == "processes" and tasks:
            if per_sample is None:
                per_sample = _seconds_per_sample(dataset, transform, tasks[0][1])
            estimate_s = None if per_sample is None else per_sample * sum(stop - start for _, start, stop in tasks)
            # Decided here, before the progress bar (tqdm runs a thread) and anything else can start a thread.
            start_method = _choose_start_method(start_method, estimate_s, num_workers)
        computed = _run(
            store,
            dataset,
            transform,
            header,
            done,
            tasks,
            backend,
            num_workers,
            ray_address,
            start_method,
            progress,
            estimate_s,
        )
        header.shards = list(done.values())
        store.write_manifest(header)
        store.remove_journal()
    seconds = time.perf_counter() - t0
    rank_zero_info(
        f"preprocess: wrote {len(tasks)} shards ({computed} samples) to {cache_dir} in {seconds:.1f}s "
        f"({computed / max(seconds, 1e-9):.0f} samples/s, backend={backend})"
    )
    return CacheInfo(cache_dir, n, header.num_shards, fp.value, header.fields, False, len(tasks), computed, seconds)


def _choose_start_method(start_method: str | None, estimate_s: float | None, num_workers: int | None) -> str:
    """Resolve the workers' start method; a forkserver that the work will use starts now, importing while the driver
    starts."""
    method = resolve_start_method(start_method)
    if method != "forkserver" or process_pool_running(method, num_workers or default_num_workers()):
        return method  # fork needs no server; a running pool (start_process_pool) takes the work at once
    if not workers_pay_off(method, estimate_s):
        return method  # small work runs in this process: no server to start for it
    if start_method is None and (reason := fork_unsafe_reason()):  # None only if the threads ended since resolving
        rank_zero_info(
            "preprocess: worker processes start from a forkserver (it imports torch and Lightning first, seconds)"
            f" because {reason}."
        )
    start_process_pool_server(method)
    return method


def _remove_unfinished(store: CacheDir, done: dict[int, dict[str, Any]]) -> None:
    """Delete shard files that no journal vouches for (and leftover temporary files)."""
    sdir = store.shards
    keep = {meta["file"] for r in done.values() for meta in r["fields"].values()}
    for path in sdir.iterdir():
        if (_worker.SHARD_FILE_RE.match(path.name) and path.name not in keep) or _worker.TMP_FILE_RE.match(path.name):
            path.unlink(missing_ok=True)


def _run(
    store: CacheDir,
    dataset: Any,
    transform: Callable[[Any], Any] | None,
    header: Manifest,
    done: dict[int, dict[str, Any]],
    tasks: list[Task],
    backend: str,
    num_workers: int | None,
    ray_address: str | None,
    start_method: str | None,
    progress: ProgressMode | bool,
    estimate_s: float | None = None,
) -> int:
    """Run the backend over ``tasks``, journaling each finished shard. Returns samples computed."""
    initial = sum(r["stop"] - r["start"] for r in done.values())
    computed = 0
    with Progress(header.num_samples, initial, desc=f"preprocess[{backend}]", mode=progress) as bar:
        for record in run_backend(
            backend, dataset, transform, store.shards, tasks, num_workers, ray_address, start_method, estimate_s
        ):
            problem = _record_matches(record, header)
            if problem is not None:
                store.remove_shard_files(record["index"])
                raise PreprocessingError(
                    f"{problem}; every sample needs the same fields, shapes and dtypes (pad, resize or cast in the"
                    " transform)."
                )
            store.append_journal(record)
            done[record["index"]] = record
            n = record["stop"] - record["start"]
            computed += n
            bar.update(n)
    return computed
