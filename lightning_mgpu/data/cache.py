"""The on-disk format of a preprocessed cache: layout, manifest, journal, checks and clean-up, owned by
:class:`CacheDir`.

Layout of ``cache_dir`` (nothing else in it is ever touched)::

    cache_dir/
        manifest.json              written last: its presence means "complete"
        .progress.jsonl            journal of finished shards while a build runs (removed at the end)
        .lock                      serialises builders on one machine (fcntl)
        shards/
            shard-00000.<field>.npy    one plain .npy file per field per shard, (n, *shape)
            shard-00001.<field>.npy
            ...

Every shard file is written to a temporary name, fsynced and renamed (``os.replace``), so a
killed run never leaves a half-written shard under its final name. Finished shards are
appended to the journal; a rerun verifies them and computes only the rest. The manifest
holds the fingerprint, the sample count, per-field shapes and dtypes, and per-file sizes and
sha256 checksums. Files are read with ``np.load(..., mmap_mode="r", allow_pickle=False)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from lightning_mgpu.data._worker import SHARD_FILE_RE, TMP_FILE_RE, file_sha256
from lightning_mgpu.data.fingerprint import FORMAT_VERSION
from lightning_mgpu.utilities.files import atomic_write

MANIFEST_NAME = "manifest.json"
JOURNAL_NAME = ".progress.jsonl"
LOCK_NAME = ".lock"
SHARD_DIR = "shards"
FORMAT_NAME = "lightning_mgpu.preprocessed"

_META_TMP_RE = re.compile(r"^\.(manifest\.json|progress\.jsonl)\.tmp\.\d+$")

Verify = Literal["none", "size", "full"]
VERIFY_MODES = ("none", "size", "full")


class CacheError(RuntimeError):
    """Base class of the errors about a preprocessed cache."""


class CacheNotFoundError(CacheError, FileNotFoundError):
    """There is no complete cache in the directory."""


class CacheMismatchError(CacheError):
    """The cache was built from another dataset or transform."""


class CorruptCacheError(CacheError):
    """A shard file is missing, truncated, or its checksum does not match the manifest."""


@dataclass(frozen=True)
class Fingerprint:
    """What a cache was built from. ``value`` combines the other parts and the format version."""

    value: str
    dataset: str
    transform: str
    dataset_name: str = ""
    transform_name: str = ""

    def difference(self, other: Fingerprint) -> str:
        """A human-readable account of what changed from ``other`` (the cache) to ``self``."""
        changed = []
        if self.dataset != other.dataset:
            changed.append(f"the dataset ({other.dataset_name or '?'} -> {self.dataset_name or '?'})")
        if self.transform != other.transform:
            changed.append(f"the transform ({other.transform_name or '?'} -> {self.transform_name or '?'})")
        return " and ".join(changed) or "the cache format"


@dataclass
class Manifest:
    """The contents of ``manifest.json`` (and the header of the journal, without ``shards``)."""

    fingerprint: Fingerprint
    num_samples: int
    chunk_size: int
    kind: str = ""
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {"shape": [...], "dtype": "<f4"}
    shards: list[dict[str, Any]] = field(default_factory=list)
    backend: str = ""
    created: str = ""
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION

    @property
    def num_shards(self) -> int:
        return -(-self.num_samples // self.chunk_size)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        data = dict(data)
        data["fingerprint"] = Fingerprint(**data["fingerprint"])
        return cls(**data)


class CacheDir:
    """A preprocessed cache's folder: its layout, manifest, journal, shard checks, lock and clean-up, in one place.

    Only the names the cache writes are ever touched (see the module docstring); anything else in the folder stays.

    Args:
        path: the folder given to :func:`~lightning_mgpu.data.preprocess`.

    Example::

        cache = CacheDir("/data/cache/train")
        manifest = cache.read_manifest()  # None until a build completed
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"CacheDir({str(self.path)!r})"

    @property
    def shards(self) -> Path:
        """The folder of the shard files."""
        return self.path / SHARD_DIR

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST_NAME

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL_NAME

    def rebuild_hint(self) -> str:
        """What to run to repair or remove this cache (ends every error about it)."""
        return (
            f"Rebuild it by rerunning `preprocess(dataset, {str(self.path)!r}, transform)` (it recomputes only missing"
            " or damaged shards; pass verify='full' to find silent corruption), or delete the cache with"
            f" `lightning_mgpu.data.clear_cache({str(self.path)!r})`."
        )

    # ------------------------------------------------------------------ manifest and journal
    def _load_json(self, path: Path, what: str) -> dict[str, Any] | None:
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise CacheError(f"{path} is not readable JSON ({err}). {self.rebuild_hint()}") from err
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise CacheError(
                f"{path} exists but is not a {what} written by lightning_mgpu.data; refusing to read or overwrite it. "
                "Point cache_dir at a directory of its own."
            )
        return data

    def read_manifest(self) -> Manifest | None:
        """The manifest of a complete cache, or ``None`` when there is none.

        Raises:
            CacheError: ``manifest.json`` is unreadable or belongs to something else.
        """
        data = self._load_json(self.manifest_path, "manifest")
        if data is None:
            return None
        if data.get("format_version") != FORMAT_VERSION:
            # A different layout: report a mismatch through the fingerprint, which embeds the version.
            data["fingerprint"] = {**data.get("fingerprint", {}), "value": f"format-{data.get('format_version')}"}
            data["format_version"] = FORMAT_VERSION
        try:
            return Manifest.from_json(data)
        except (TypeError, KeyError) as err:
            raise CacheError(f"{self.manifest_path} is malformed ({err}). {self.rebuild_hint()}") from err

    def write_manifest(self, manifest: Manifest) -> None:
        """Write the manifest last, atomically: from then on the cache is complete."""
        manifest.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest.shards = sorted(manifest.shards, key=lambda r: r["index"])
        # The cache's own temporary naming, which remove_stale_tmp recognises.
        path = self.manifest_path
        atomic_write(
            path,
            lambda f: f.write(json.dumps(manifest.to_json(), indent=1).encode()),
            tmp=path.with_name(f".{path.name}.tmp.{os.getpid()}"),
        )

    def start_journal(self, header: Manifest, records: Iterable[dict[str, Any]] = ()) -> None:
        """Start a fresh journal: ``header`` (without shard records), then ``records`` already done."""
        data = header.to_json()
        data.pop("shards")
        lines = [json.dumps(data), *(json.dumps(r) for r in records)]
        tmp = self.path / f".{JOURNAL_NAME.lstrip('.')}.tmp.{os.getpid()}"
        atomic_write(self.journal_path, lambda f: f.write(("\n".join(lines) + "\n").encode()), tmp=tmp)

    def append_journal(self, record: dict[str, Any]) -> None:
        """Record a finished shard. A line torn by a kill is ignored when the journal is read."""
        with open(self.journal_path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read_journal(self) -> Manifest | None:
        """The header and finished shards of an interrupted build, or ``None``."""
        if not self.journal_path.exists():
            return None
        lines = self.journal_path.read_text().splitlines()
        try:
            header = json.loads(lines[0]) if lines else None
            if (
                not isinstance(header, dict)
                or header.get("format") != FORMAT_NAME
                or header.get("format_version") != FORMAT_VERSION
            ):
                return None
            manifest = Manifest.from_json({**header, "shards": []})
        except (ValueError, TypeError, KeyError):
            return None  # unreadable journal: start over
        for line in lines[1:]:
            try:
                manifest.shards.append(json.loads(line))
            except ValueError:
                continue  # the last line, torn by a kill
        return manifest

    def remove_journal(self) -> None:
        self.journal_path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ shards
    def check_shard(self, record: dict[str, Any], verify: Verify) -> str | None:
        """Why a shard is unusable (missing, wrong size, wrong checksum), or ``None`` if it is fine.

        ``verify="size"`` costs one ``stat`` per file; ``"full"`` reads and hashes every byte.
        """
        if verify == "none":
            return None
        for meta in record["fields"].values():
            path = self.shards / meta["file"]
            if not path.is_file():
                return f"{path} is missing"
            size = path.stat().st_size
            if size != meta["bytes"]:
                return f"{path} has {size} bytes, the manifest says {meta['bytes']} (truncated or overwritten)"
            if verify == "full" and file_sha256(path) != meta["sha256"]:
                return f"{path} does not match its sha256 checksum (corrupted on disk)"
        return None

    def remove_shard_files(self, shard_index: int | None = None) -> list[Path]:
        """Delete the cache's own shard files (all, or one shard's) and leftover temporary files."""
        removed: list[Path] = []
        if not self.shards.is_dir():
            return removed
        for path in self.shards.iterdir():
            m = SHARD_FILE_RE.match(path.name)
            ours = (m is not None and (shard_index is None or int(m.group(1)) == shard_index)) or (
                TMP_FILE_RE.match(path.name) is not None
                and (shard_index is None or path.name.startswith(f".shard-{shard_index:05d}."))
            )
            if ours and path.is_file():
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def remove_stale_tmp(self) -> list[Path]:
        """Delete temporary manifest/journal files left by a process killed while writing them."""
        removed = []
        for path in self.path.glob(".*.tmp.*"):
            if _META_TMP_RE.match(path.name) and path.is_file():
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def clear(self) -> list[Path]:
        """Delete the cache's own files (the manifest first); see :func:`clear_cache`."""
        removed: list[Path] = []
        self._load_json(self.manifest_path, "manifest")  # refuse a foreign manifest.json
        for name in (MANIFEST_NAME, JOURNAL_NAME, LOCK_NAME):
            path = self.path / name
            if path.exists():
                path.unlink()
                removed.append(path)
        removed += self.remove_shard_files() + self.remove_stale_tmp()
        with contextlib.suppress(OSError):  # only if empty: a user's file in shards/ keeps it
            self.shards.rmdir()
        return removed

    @contextlib.contextmanager
    def lock(self, log: Any = None) -> Iterator[None]:
        """Hold an exclusive lock on the folder while building (one builder per cache at a time).

        Uses ``fcntl.flock``: it serialises processes of one machine (and of several machines on file systems whose
        flock is cluster-wide). Elsewhere it is a no-op.
        """
        try:
            import fcntl
        except ImportError:  # Windows
            yield
            return
        with open(self.path / LOCK_NAME, "a") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                if log is not None:
                    log(f"waiting for another process that is building the cache in {self.path}")
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def clear_cache(cache_dir: str | Path) -> list[Path]:
    """Delete a preprocessed cache's own files, leaving everything else in ``cache_dir``.

    The manifest goes first, so an interrupted clear never leaves a manifest that points at
    deleted shards.

    Args:
        cache_dir: the directory given to :func:`preprocess`.

    Returns:
        The paths removed.

    Raises:
        CacheError: ``manifest.json`` in ``cache_dir`` was not written by this library.

    Example::

        clear_cache("/data/cache/train")
    """
    return CacheDir(cache_dir).clear()


def read_manifest(cache_dir: str | Path) -> Manifest | None:
    """The manifest of the complete cache in ``cache_dir``, or ``None`` (see :meth:`CacheDir.read_manifest`)."""
    return CacheDir(cache_dir).read_manifest()
