"""``PreprocessedDataModule``: any Dataset plus a transform, cached once, read by every rank."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from lightning_mgpu.data.backends import Backend, process_pool_scope, ray_session
from lightning_mgpu.data.cache import VERIFY_MODES, Verify
from lightning_mgpu.data.dataset import PreprocessedDataset, TransformedDataset
from lightning_mgpu.data.loader import resumable_loader
from lightning_mgpu.data.preprocess import OnMismatch, compute_fingerprint, preprocess
from lightning_mgpu.data.progress import ProgressMode

SPLITS = ("train", "val", "test", "predict")


class PreprocessedDataModule(LightningDataModule):
    """Wraps datasets and a deterministic transform; caches the transform's output once.

    ``prepare_data`` (which Lightning runs on one process per node, or on global rank 0 only
    with ``prepare_data_per_node=False``, for a cache on a shared file system) builds or
    validates one cache per split in ``cache_dir/<split>``. ``setup`` waits for it on every
    rank, checks the fingerprint, and opens :class:`PreprocessedDataset` views. Lightning adds
    a ``DistributedSampler`` to the loaders under distributed strategies.

    Args:
        train_dataset: the raw training set (map-style).
        cache_dir: root of the caches; each split goes to its own subdirectory.
        transform: the deterministic, expensive part of the pipeline (cached).
        val_dataset: raw validation set, optional; likewise ``test_dataset``, ``predict_dataset``.
        batch_size: per-device batch size.
        num_workers: DataLoader workers per process.
        augment: online augmentation for the training split only (never cached).
        cache: ``False`` skips the cache and applies ``transform`` in ``__getitem__`` (to compare).
        backend: ``preprocess`` backend: ``"serial"``, ``"processes"`` or ``"ray"``.
        preprocess_workers: ``preprocess``'s ``num_workers``.
        verify: how much of an existing cache is checked. ``"full"`` (default): ``prepare_data``
            hashes every shard file against the manifest's sha256 once per run, and recomputes a
            damaged shard (warning with its file name); ``setup`` then only compares file sizes on
            every rank, so that the cache is hashed once, not once per rank. ``"size"``: sizes only,
            in both (a silent bit flip goes unnoticed; for caches too large to read each run).
            ``"none"``: no check.
        chunk_size, ray_address, on_mismatch, transform_version, transform_fingerprint,
            progress: passed to :func:`~lightning_mgpu.data.preprocess`.
        dataset_fingerprints: ``{split: key}`` passed as ``dataset_fingerprint`` per split.
        shuffle: shuffle the training loader.
        drop_last: drop the last incomplete training batch.
        pin_memory: pin loader memory (for GPU training).
        seed: seed of the loaders' own generators (shuffle order, worker seeds); the global RNG is left alone.

    Example::

        dm = PreprocessedDataModule(train_set, "cache/", transform=extract_features, val_dataset=val_set, backend="ray")
        Trainer(strategy="ddp", devices=4).fit(model, dm)
    """

    def __init__(
        self,
        train_dataset: Dataset | None,
        cache_dir: str | os.PathLike,
        transform: Callable[[Any], Any] | None = None,
        *,
        val_dataset: Dataset | None = None,
        test_dataset: Dataset | None = None,
        predict_dataset: Dataset | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        augment: Callable[[Any], Any] | None = None,
        cache: bool = True,
        backend: Backend = "processes",
        preprocess_workers: int | None = None,
        chunk_size: int | None = None,
        ray_address: str | None = None,
        on_mismatch: OnMismatch = "rebuild",
        verify: Verify = "full",
        dataset_fingerprints: Mapping[str, str] | None = None,
        transform_version: str | int | None = None,
        transform_fingerprint: str | None = None,
        progress: ProgressMode | bool = "auto",
        shuffle: bool = True,
        drop_last: bool = False,
        pin_memory: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}.")
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify={verify!r} is not supported; use one of {', '.join(map(repr, VERIFY_MODES))}.")
        self.raw = {
            s: d for s, d in zip(SPLITS, (train_dataset, val_dataset, test_dataset, predict_dataset)) if d is not None
        }
        if not self.raw:
            raise ValueError("PreprocessedDataModule needs at least one dataset (train_dataset, val_dataset, ...).")
        unknown = set(dataset_fingerprints or {}) - set(SPLITS)
        if unknown:
            raise ValueError(f"dataset_fingerprints has unknown splits {sorted(unknown)}; use {SPLITS}.")
        self.cache_dir = Path(cache_dir)
        self.transform, self.augment, self.use_cache = transform, augment, cache
        self.batch_size, self.num_workers = batch_size, num_workers
        self.shuffle, self.drop_last, self.pin_memory, self.seed = shuffle, drop_last, pin_memory, seed
        self.dataset_fingerprints = dict(dataset_fingerprints or {})
        self.transform_version, self.transform_fingerprint = transform_version, transform_fingerprint
        self.verify = verify
        self.preprocess_kwargs: dict[str, Any] = dict(
            backend=backend,
            num_workers=preprocess_workers,
            chunk_size=chunk_size,
            ray_address=ray_address,
            on_mismatch=on_mismatch,
            verify=verify,
            progress=progress,
        )
        self.datasets: dict[str, Dataset] = {}

    def split_dir(self, split: str) -> Path:
        """Where the cache of ``split`` lives."""
        return self.cache_dir / split

    @override
    def prepare_data(self) -> None:
        if not self.use_cache:
            return
        # At most one Ray or worker-pool start-up for all splits, none when every cache is already
        # built, and nothing left running afterwards.
        with ray_session(lazy=True), process_pool_scope():
            self._prepare_splits()

    def _prepare_splits(self) -> None:
        for split, dataset in self.raw.items():
            preprocess(
                dataset,
                self.split_dir(split),
                self.transform,
                dataset_fingerprint=self.dataset_fingerprints.get(split),
                transform_version=self.transform_version,
                transform_fingerprint=self.transform_fingerprint,
                **self.preprocess_kwargs,
            )

    @override
    def setup(self, stage: str) -> None:
        if self.datasets:
            return
        trainer = self.trainer
        if trainer is not None and self.use_cache:
            # Strategies whose prepare_data is not followed by a barrier (e.g. Horovod) must not
            # read the cache before the preparing rank has finished writing it.
            trainer.strategy.barrier("lightning_mgpu.data.setup")
        for split, dataset in self.raw.items():
            augment = self.augment if split == "train" else None
            if not self.use_cache:
                self.datasets[split] = TransformedDataset(dataset, self.transform, augment)
                continue
            fp = compute_fingerprint(
                dataset,
                self.transform,
                self.dataset_fingerprints.get(split),
                self.transform_version,
                self.transform_fingerprint,
            )
            # prepare_data has hashed the cache once this run; every rank re-hashing it would cost
            # world_size full reads for nothing. The size check still catches a missing or
            # truncated file on a rank whose file system differs from the preparing rank's.
            verify = "size" if self.verify == "full" else self.verify
            self.datasets[split] = PreprocessedDataset(
                self.split_dir(split), augment=augment, expected_fingerprint=fp, verify=verify
            )

    def _loader(self, split: str, train: bool) -> DataLoader | list:
        if split not in self.datasets:
            if split in self.raw:
                raise RuntimeError(f"The {split} data is not set up: call setup() first (the Trainer does).")
            if train:
                raise RuntimeError("No training data: pass train_dataset= to PreprocessedDataModule.")
            return []  # no such split: Lightning skips the loop
        # Stateful and seeded: a mid-epoch checkpoint resumes at the same batch (lightning_mgpu.data.loader).
        return resumable_loader(
            self.datasets[split],
            batch_size=self.batch_size,
            shuffle=self.shuffle and train,
            seed=self.seed,
            drop_last=self.drop_last and train,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
        )

    @override
    def train_dataloader(self) -> DataLoader | list:
        return self._loader("train", train=True)

    @override
    def val_dataloader(self) -> DataLoader | list:
        return self._loader("val", train=False)

    @override
    def test_dataloader(self) -> DataLoader | list:
        return self._loader("test", train=False)

    @override
    def predict_dataloader(self) -> DataLoader | list:
        return self._loader("predict", train=False)
