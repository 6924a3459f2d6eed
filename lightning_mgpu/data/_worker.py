"""The code that runs inside preprocessing workers: compute one chunk, write one shard.

This module imports only the standard library and numpy, on purpose: the Ray backend ships it
to workers by value, so a Ray worker never has to import ``lightning_mgpu`` (and through it
Lightning, which takes seconds). The process backend preloads it into the forkserver once. It
uses ``pickle`` only for the driver's messages to its own workers, never for the cache.

A sample (the transform's output, or the raw sample without a transform) is one of:

- a mapping ``{name: array_like}`` -> fields named by the keys (``kind="dict"``);
- a tuple or list ``(array_like, ...)`` -> fields ``"0"``, ``"1"``, ... (``kind="tuple"``);
- a single array_like -> one field ``"data"`` (``kind="array"``).

``array_like`` is anything ``numpy.asarray`` turns into a non-object array: numpy arrays, CPU
torch tensors, Python numbers, booleans. Every sample must have the same fields, shapes and
dtypes, because a shard stores each field as one stacked ``(n, *shape)`` array.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import secrets
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: Field names become part of file names, so they are restricted to a safe alphabet.
FIELD_NAME_RE = re.compile(r"^[A-Za-z0-9_\-]+$")
#: A finished shard file: ``shard-00012.image.npy``.
SHARD_FILE_RE = re.compile(r"^shard-(\d{5,})\.([A-Za-z0-9_\-]+)\.npy$")
#: A shard file being written; never read, removed by the next run.
TMP_FILE_RE = re.compile(r"^\.shard-\d{5,}\.[A-Za-z0-9_\-]+\.npy\.tmp\.\d+\.[0-9a-f]+$")

_HASH_BLOCK = 1 << 22


class ChunkError(RuntimeError):
    """A sample of the dataset could not be read, transformed or stacked into a shard."""


def shard_file_name(shard_index: int, field: str) -> str:
    return f"shard-{shard_index:05d}.{field}.npy"


def to_array(value: Any, where: str) -> np.ndarray:
    """``value`` as a numpy array that ``np.save`` can write without pickle.

    Raises:
        ChunkError: the value has no plain numpy dtype (objects, ragged lists, bfloat16).
    """
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor, without importing torch
        try:
            value = value.detach().cpu().numpy()
        except TypeError as err:  # e.g. bfloat16 has no numpy dtype
            raise ChunkError(
                f"{where}: cannot store a tensor of dtype {value.dtype} ({err}); cast it in the transform, e.g."
                " `.float()`."
            ) from None
    try:
        arr = np.asarray(value)
    except ValueError as err:  # ragged nested lists
        raise ChunkError(f"{where}: cannot be stored as an array ({err}); pad or stack it in the transform.") from None
    if arr.dtype.hasobject:
        raise ChunkError(
            f"{where}: has type {type(value).__name__} and would need pickle (numpy dtype object); the cache stores"
            " plain numeric/bool/fixed-width string arrays only. Convert it in the transform, e.g. to a numpy array or"
            " a number."
        )
    return arr


def sample_to_fields(sample: Any, index: int) -> tuple[str, list[str], list[np.ndarray]]:
    """Split one sample into ``(kind, field_names, arrays)``; see the module docstring."""
    where = f"sample {index}"
    if isinstance(sample, Mapping):
        names = [str(k) for k in sample]
        for name in names:
            if not FIELD_NAME_RE.match(name):
                raise ChunkError(
                    f"{where}: field name {name!r} must match [A-Za-z0-9_-]+ (it becomes part of a file name); rename"
                    " the key."
                )
        return "dict", names, [to_array(sample[k], f"{where} field {k!r}") for k in sample]
    if isinstance(sample, (tuple, list)):
        if not sample:
            raise ChunkError(f"{where}: is an empty {type(sample).__name__}; return at least one field.")
        return (
            "tuple",
            [str(i) for i in range(len(sample))],
            [to_array(v, f"{where} field {i}") for i, v in enumerate(sample)],
        )
    return "array", ["data"], [to_array(sample, where)]


def compute_chunk(
    dataset: Any, transform: Callable[[Any], Any] | None, start: int, stop: int
) -> tuple[str, list[str], list[np.ndarray]]:
    """Read and transform samples ``start..stop-1`` and stack each field.

    Returns:
        ``(kind, field_names, arrays)`` where ``arrays[k]`` has shape ``(stop - start, *field_shape)``.

    Raises:
        ChunkError: a sample failed to load or transform, or differs in structure, shape or dtype
            from the first sample of the chunk. The message names the sample index.
    """
    kind, names, stacked = "", [], []
    for i in range(start, stop):
        try:
            sample = dataset[i]
            out = transform(sample) if transform is not None else sample
        except Exception as err:  # noqa: BLE001 - re-raised with the sample index, which the caller needs to debug
            raise ChunkError(f"preprocessing sample {i} failed: {type(err).__name__}: {err}") from err
        k, n, arrays = sample_to_fields(out, i)
        if i == start:
            kind, names = k, n
            stacked = [np.empty((stop - start, *a.shape), dtype=a.dtype) for a in arrays]
        elif (k, n) != (kind, names):
            raise ChunkError(
                f"sample {i} has fields {n} ({k}) but sample {start} has {names} ({kind}); every sample needs the same"
                " fields."
            )
        for name, dst, a in zip(names, stacked, arrays):
            if a.shape != dst.shape[1:] or a.dtype != dst.dtype:
                raise ChunkError(
                    f"sample {i} field {name!r} has shape {a.shape} dtype {a.dtype} but sample {start} has shape"
                    f" {dst.shape[1:]} dtype {dst.dtype}; every sample must have the same shape and dtype (pad, resize"
                    " or cast in the transform)."
                )
            dst[i - start] = a
    return kind, names, stacked


class _HashingWriter:
    """A write-only file wrapper that hashes every byte on its way to disk."""

    def __init__(self, f: Any, h: Any) -> None:
        self._f, self._h = f, h

    def write(self, data: bytes | memoryview) -> int:
        self._h.update(data)
        return self._f.write(data)


def write_npy_atomic(path: Path, arr: np.ndarray) -> tuple[int, str]:
    """Write ``arr`` as ``.npy`` to a temporary name, fsync, then rename onto ``path``.

    A process killed mid-write leaves only a ``.tmp`` file, never a truncated ``path``.

    Returns:
        ``(size_in_bytes, sha256_hex)`` of the file written.
    """
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}.{secrets.token_hex(4)}")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as f:
            np.lib.format.write_array(_HashingWriter(f, h), np.ascontiguousarray(arr), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path.stat().st_size, h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def write_shard(
    shard_dir: str | Path,
    shard_index: int,
    start: int,
    stop: int,
    kind: str,
    names: Sequence[str],
    arrays: Sequence[np.ndarray],
) -> dict[str, Any]:
    """Write one shard (one ``.npy`` file per field) and return its record for the manifest."""
    shard_dir = Path(shard_dir)
    fields: dict[str, Any] = {}
    for name, arr in zip(names, arrays):
        file_name = shard_file_name(shard_index, name)
        size, digest = write_npy_atomic(shard_dir / file_name, arr)
        fields[name] = {
            "file": file_name,
            "bytes": size,
            "sha256": digest,
            "shape": list(arr.shape[1:]),
            "dtype": arr.dtype.str,
        }
    return {"index": shard_index, "start": start, "stop": stop, "kind": kind, "fields": fields}


def limit_threads(threads: int = 1, include_torch: bool = True) -> Any:
    """Cap this process's torch and BLAS/OpenMP thread pools; returns the threadpoolctl handle.

    N workers each running N BLAS threads oversubscribe the cores, and OpenBLAS threads spin
    while waiting: on 2 cores, 2 workers ran 3x slower than one process before this cap.
    ``threadpoolctl`` is a dependency of the bundle; where it is missing only torch is capped.
    """
    torch = sys.modules.get("torch") if include_torch else None
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits(limits=threads)


# --- process-pool workers ----------------------------------------------------------------------
_STATE: dict[str, Any] = {}


def pool_worker(conn: Any, inherited: tuple[Any, ...] | None = None, close: Sequence[Any] = ()) -> None:
    """Main loop of a process-pool worker (``backends.ProcessPool``).

    Requests arrive over this worker's own pipe and are answered in order:

    - ``("load", dataset, transform, shard_dir)`` -> ``("ok", None)``: the call's data, sent
      once per worker per call, not once per chunk (a forked worker gets it as ``inherited``);
    - ``("chunk", shard_index, start, stop)`` -> ``("ok", record)`` once the shard is written;
    - ``("unload",)``, no answer: the call is over, drop its data (an idle worker holds none);
    - ``("exit",)``, or the pipe closing: return.

    A failure answers ``("error", message)`` and leaves the worker usable.

    Args:
        conn: this worker's end of its pipe.
        inherited: ``(dataset, transform, shard_dir)`` of a worker forked for one call.
        close: the driver's pipe ends that a forked worker inherited; closed first.
    """
    # Ctrl-C reaches the whole process group: the driver handles it and terminates the workers,
    # so a worker must not die of it with a traceback of its own first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    state: tuple[Any, ...] | None = None
    if inherited is not None:
        for c in close:
            c.close()
        # A forked worker inherits the driver's Python handlers (Lightning's, SaveOnInterrupt's), which may only set a
        # flag: the driver's terminate() must end the worker.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        state = inherited
        limit_threads(1)
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the driver closed the pipe or is gone
        try:
            # Unpickled here rather than by conn.recv(), so that a dataset whose class cannot be
            # imported in the worker is reported to the driver instead of killing the worker.
            request = pickle.loads(data)
            if request[0] == "exit":
                return
            if request[0] == "unload":
                state = None
                continue
            if request[0] == "load":
                state = tuple(request[1:])
                limit_threads(1)  # after unpickling: the dataset may have imported torch or a BLAS
                reply: tuple[str, Any] = ("ok", None)
            else:
                _, shard_index, start, stop = request
                dataset, transform, shard_dir = state  # type: ignore[misc]
                kind, names, arrays = compute_chunk(dataset, transform, start, stop)
                reply = ("ok", write_shard(shard_dir, shard_index, start, stop, kind, names, arrays))
        except Exception as err:  # noqa: BLE001 - answered to the driver, which raises it with context
            reply = ("error", str(err) if isinstance(err, ChunkError) else f"{type(err).__name__}: {err}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


# --- Ray tasks -----------------------------------------------------------------------------------
def ray_compute_chunk(
    payload: tuple[Any, Callable[[Any], Any] | None], start: int, stop: int
) -> tuple[str, list[str], list[np.ndarray]]:
    """Ray task: ``payload`` is the ``ray.put`` of ``(dataset, transform)``, resolved by Ray."""
    dataset, transform = payload
    # Ray sets OMP_NUM_THREADS=1 in workers, but not every library reads it. Once per worker
    # process, not per task: threadpoolctl scans the loaded libraries (2-15 ms) on every call.
    if _STATE.get("ray_threads_limited_pid") != os.getpid():
        limit_threads(1)
        _STATE["ray_threads_limited_pid"] = os.getpid()
    return compute_chunk(dataset, transform, start, stop)
