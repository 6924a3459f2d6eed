"""Datasets that read a preprocessed cache, or apply the same transform on the fly."""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from lightning_mgpu.data import cache
from lightning_mgpu.data._worker import sample_to_fields
from lightning_mgpu.data.cache import (
    CacheMismatchError,
    CacheNotFoundError,
    CorruptCacheError,
    Fingerprint,
    Manifest,
    Verify,
)

_readonly_warning_consumed = False


def _from_numpy_readonly(arr: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` on a read-only memory map, without its one-time UserWarning.

    torch warns once per process that non-writable arrays give tensors whose in-place writes
    are undefined. The first conversion runs with the warning suppressed, which uses up that
    "once"; later conversions cost nothing extra. Callers never write in place: samples are
    copied by the collate function, and ``augment`` receives a private copy.
    """
    global _readonly_warning_consumed
    if _readonly_warning_consumed:
        return torch.from_numpy(arr)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        t = torch.from_numpy(arr)
    _readonly_warning_consumed = True
    return t


def _assemble(kind: str, names: list[str], values: list[Any]) -> Any:
    if kind == "dict":
        return dict(zip(names, values))
    if kind == "tuple":
        return tuple(values)
    return values[0]


class PreprocessedDataset(Dataset):
    """A map-style dataset over a cache written by :func:`~lightning_mgpu.data.preprocess`.

    Shards are memory-mapped (``np.load(mmap_mode="r", allow_pickle=False)``: no pickle is
    ever loaded) and a sample is a zero-copy ``torch.from_numpy`` view of the map, returned in
    the structure the transform produced (dict, tuple, or one tensor). The default collate
    function copies samples into a fresh batch, so nothing downstream writes to the map. It
    works with any sampler, ``DistributedSampler`` included (Lightning injects one under
    ``ddp``, ``ddp_spawn``, ``sharded``, ``horovod``), and with ``DataLoader`` workers: maps are
    opened lazily in each process and never pickled.

    Checks at open: the manifest is read and every shard file's size compared with it (one
    ``stat`` per file). ``verify="full"`` also hashes every byte against the manifest's sha256
    (reads the whole cache once). Each shard's ``.npy`` header is checked against the
    manifest when the shard is first mapped.

    Args:
        cache_dir: the directory given to ``preprocess``.
        augment: optional callable applied to every sample on access (online, never cached):
            the place for random augmentation. It receives a writable copy of the sample.
        expected_fingerprint: the fingerprint the cache must have (from
            :func:`~lightning_mgpu.data.preprocess.compute_fingerprint`); a different one
            raises instead of silently training on stale data.
        verify: ``"size"`` (default), ``"full"`` or ``"none"``; see above.
        max_open_shards: memory maps kept open per process (each holds a file descriptor).

    Raises:
        CacheNotFoundError: there is no complete cache in ``cache_dir``.
        CacheMismatchError: ``expected_fingerprint`` differs from the cache's.
        CorruptCacheError: a shard file is missing, truncated or fails its checksum; the
            message names the file and how to rebuild it.

    Example::

        preprocess(train_set, "cache/train", transform=extract_features)
        loader = DataLoader(PreprocessedDataset("cache/train", augment=random_flip), batch_size=64, shuffle=True)
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike,
        augment: Callable[[Any], Any] | None = None,
        expected_fingerprint: str | Fingerprint | None = None,
        verify: Verify = "size",
        max_open_shards: int = 64,
    ) -> None:
        if verify not in cache.VERIFY_MODES:
            raise ValueError(
                f"verify={verify!r} is not supported; use one of {', '.join(map(repr, cache.VERIFY_MODES))}."
            )
        self.cache_dir = Path(cache_dir)
        self._cache = cache.CacheDir(self.cache_dir)
        self.augment = augment
        self.max_open_shards = max(1, max_open_shards)
        self.manifest = self._read_manifest(expected_fingerprint)
        self._names = list(self.manifest.fields)
        self._check_shards(verify)
        self._maps: OrderedDict[int, list[np.ndarray]] = OrderedDict()

    def _read_manifest(self, expected: str | Fingerprint | None) -> Manifest:
        manifest = self._cache.read_manifest()
        if manifest is None:
            state = (
                "an interrupted build (a journal but no manifest)"
                if self._cache.journal_path.exists()
                else "no manifest.json"
            )
            raise CacheNotFoundError(
                f"No complete preprocessed cache in {self.cache_dir} ({state}). Build or resume it with "
                f"`preprocess(dataset, {str(self.cache_dir)!r}, transform)`."
            )
        if expected is not None:
            want = expected.value if isinstance(expected, Fingerprint) else expected
            if manifest.fingerprint.value != want:
                what = (
                    expected.difference(manifest.fingerprint)
                    if isinstance(expected, Fingerprint)
                    else "the dataset or transform"
                )
                raise CacheMismatchError(
                    f"The cache in {self.cache_dir} was built from a different input ({what} changed: fingerprint"
                    f" {manifest.fingerprint.value[:12]} != {want[:12]}). Rebuild it with `preprocess(dataset,"
                    f" {str(self.cache_dir)!r}, transform)` (on_mismatch='rebuild' is the default), or point cache_dir"
                    " elsewhere."
                )
        if len(manifest.shards) != manifest.num_shards:
            raise CorruptCacheError(
                f"{self._cache.manifest_path} lists {len(manifest.shards)} shards, expected {manifest.num_shards}."
                f" {self._cache.rebuild_hint()}"
            )
        return manifest

    def _check_shards(self, verify: Verify) -> None:
        for record in self.manifest.shards:
            reason = self._cache.check_shard(record, verify)
            if reason is not None:
                raise CorruptCacheError(
                    f"Shard {record['index']} of the cache in {self.cache_dir} is unusable: {reason}."
                    f" {self._cache.rebuild_hint()}"
                )

    def __len__(self) -> int:
        return self.manifest.num_samples

    @property
    def fields(self) -> dict[str, dict[str, Any]]:
        """Per-field ``{"shape": [...], "dtype": "<f4"}`` of one sample."""
        return self.manifest.fields

    def _open(self, shard: int) -> list[np.ndarray]:
        maps = self._maps.get(shard)
        if maps is not None:
            self._maps.move_to_end(shard)
            return maps
        record = self.manifest.shards[shard]
        maps = []
        for name in self._names:
            meta = record["fields"][name]
            path = self._cache.shards / meta["file"]
            try:
                arr = np.load(path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as err:
                raise CorruptCacheError(
                    f"Shard file {path} cannot be read as .npy ({err}). {self._cache.rebuild_hint()}"
                ) from err
            expected_shape = (record["stop"] - record["start"], *self.manifest.fields[name]["shape"])
            if arr.shape != expected_shape or arr.dtype.str != self.manifest.fields[name]["dtype"]:
                raise CorruptCacheError(
                    f"Shard file {path} holds {arr.shape} {arr.dtype.str}, the manifest says {expected_shape} "
                    f"{self.manifest.fields[name]['dtype']}. {self._cache.rebuild_hint()}"
                )
            maps.append(arr)
        self._maps[shard] = maps
        if len(self._maps) > self.max_open_shards:
            self._maps.popitem(last=False)
        return maps

    def __getitem__(self, index: int) -> Any:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} is out of range for a cache of {n} samples")
        shard, offset = divmod(int(index), self.manifest.chunk_size)
        # A scalar field indexes to a numpy scalar, which from_numpy rejects: make it a 0-d array.
        rows = [r if isinstance(r, np.ndarray) else np.asarray(r) for r in (m[offset] for m in self._open(shard))]
        if self.augment is None:
            return _assemble(self.manifest.kind, self._names, [_from_numpy_readonly(r) for r in rows])
        # augment may write in place: give it a private copy, never the read-only map.
        sample = _assemble(self.manifest.kind, self._names, [torch.from_numpy(np.array(r)) for r in rows])
        return self.augment(sample)

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps are per process: DataLoader workers (spawn) and ddp_spawn reopen them.
        state = self.__dict__.copy()
        state["_maps"] = OrderedDict()
        return state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self.cache_dir)!r}, samples={len(self)}, shards={self.manifest.num_shards},"
            f" fields={self.fields})"
        )


class TransformedDataset(Dataset):
    """Applies ``transform`` (then ``augment``) in ``__getitem__``: the on-the-fly equivalent.

    Returns exactly what :class:`PreprocessedDataset` returns for a cache of the same dataset
    and transform (same structure, tensors of the same dtypes), so the two are interchangeable;
    use it to compare, or when a cache does not pay off.

    Args:
        dataset: a map-style dataset.
        transform: the deterministic transform (as given to ``preprocess``), or ``None``.
        augment: optional online augmentation, as in :class:`PreprocessedDataset`.

    Example::

        slow = TransformedDataset(train_set, extract_features)   # transform every epoch
    """

    def __init__(
        self, dataset: Any, transform: Callable[[Any], Any] | None = None, augment: Callable[[Any], Any] | None = None
    ) -> None:
        self.dataset, self.transform, self.augment = dataset, transform, augment

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        sample = self.dataset[index]
        out = self.transform(sample) if self.transform is not None else sample
        kind, names, arrays = sample_to_fields(out, index)
        sample = _assemble(kind, names, [torch.from_numpy(np.array(a)) for a in arrays])
        return self.augment(sample) if self.augment is not None else sample
