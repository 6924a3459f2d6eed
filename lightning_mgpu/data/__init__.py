"""Parallel dataset preprocessing into a memory-mapped cache.

Run the deterministic, expensive part of a pipeline once, in parallel (local processes or Ray),
into a few large ``.npy`` shards with a manifest; train from zero-copy memory maps.

Example::

    from lightning_mgpu.data import PreprocessedDataModule, PreprocessedDataset, preprocess

    preprocess(train_set, "cache/train", transform=extract_features, backend="processes")
    dataset = PreprocessedDataset("cache/train", augment=random_flip)

    dm = PreprocessedDataModule(train_set, "cache/", transform=extract_features, val_dataset=val_set)
    Trainer(strategy="ddp", devices=2).fit(model, dm)

See ``docs/data.md``.
"""

from lightning_mgpu.data.backends import (
    BACKENDS,
    PreprocessingError,
    process_pool_scope,
    ray_session,
    shutdown_process_pool,
    start_process_pool,
)
from lightning_mgpu.data.cache import (
    CacheDir,
    CacheError,
    CacheMismatchError,
    CacheNotFoundError,
    CorruptCacheError,
    Fingerprint,
    Manifest,
    clear_cache,
    read_manifest,
)
from lightning_mgpu.data.datamodule import PreprocessedDataModule
from lightning_mgpu.data.dataset import PreprocessedDataset, TransformedDataset
from lightning_mgpu.data.fingerprint import fingerprint_dataset, fingerprint_transform
from lightning_mgpu.data.preprocess import CacheInfo, compute_fingerprint, preprocess
from lightning_mgpu.data.progress import Progress

__all__ = [
    "CacheDir",
    "BACKENDS",
    "CacheError",
    "CacheInfo",
    "CacheMismatchError",
    "CacheNotFoundError",
    "CorruptCacheError",
    "Fingerprint",
    "Manifest",
    "PreprocessedDataModule",
    "PreprocessedDataset",
    "PreprocessingError",
    "Progress",
    "TransformedDataset",
    "clear_cache",
    "compute_fingerprint",
    "fingerprint_dataset",
    "fingerprint_transform",
    "preprocess",
    "process_pool_scope",
    "ray_session",
    "read_manifest",
    "shutdown_process_pool",
    "start_process_pool",
]
