"""Digits with a deliberately expensive, deterministic feature transform: the cache's showcase.

:class:`DigitsFeatures` turns an 8x8 digit into HOG-like orientation maps: bicubic-style
upsampling to 64x64, gradients at several Gaussian scales, soft binning of the gradient
orientation into 8 channels weighted by magnitude, and 8x8-pixel cell pooling (as in HOG) back to 8x8. It costs a
few milliseconds per sample in numpy, which on the fly would be paid again every epoch; cached
with :func:`lightning_mgpu.data.preprocess` it is paid once.

Example::

    dm = digits_preprocessed_datamodule("cache/digits", backend="processes", batch_size=32, num_workers=0)
    model = ImageClassifier(in_channels=dm.image_shape[0], num_classes=dm.num_classes)
    Trainer(strategy="ddp", devices=2).fit(model, dm)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from lightning_mgpu.data import PreprocessedDataModule
from lightning_mgpu.demos.digits import load_digits_tensors


def _interp_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` Catmull-Rom (cubic) interpolation weights with clamped borders."""
    pos = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    base = np.floor(pos).astype(int)
    t = pos - base
    weights = np.stack(
        [
            (-0.5 * t**3 + t**2 - 0.5 * t),
            (1.5 * t**3 - 2.5 * t**2 + 1),
            (-1.5 * t**3 + 2 * t**2 + 0.5 * t),
            (0.5 * t**3 - 0.5 * t**2),
        ],
        axis=1,
    )
    m = np.zeros((n_out, n_in))
    for k in range(4):
        np.add.at(m, (np.arange(n_out), np.clip(base + k - 1, 0, n_in - 1)), weights[:, k])
    return m


def _gaussian_matrix(n: int, sigma: float) -> np.ndarray:
    """``(n, n)`` row-normalised Gaussian blur (applied as ``G @ img @ G.T``)."""
    d = np.arange(n)[:, None] - np.arange(n)[None, :]
    g = np.exp(-0.5 * (d / sigma) ** 2)
    return g / g.sum(axis=1, keepdims=True)


class DigitsFeatures:
    """8x8 digit -> ``(1 + 8 x len(scales), 8, 8)`` float32 orientation maps (see module docstring).

    Deterministic (no randomness, fixed float32/float64 numpy arithmetic), so it can be cached.

    Args:
        upsample: side of the intermediate image.
        out_size: side of the output maps (``upsample`` must be a multiple).
        orientations: orientation bins over [0, pi).
        scales: Gaussian sigmas (in upsampled pixels) at which gradients are taken.

    Example::

        x, y = DigitsFeatures()((torch.rand(1, 8, 8), torch.tensor(3)))   # x: (17, 8, 8) float32
    """

    def __init__(
        self, upsample: int = 64, out_size: int = 8, orientations: int = 8, scales: tuple[float, ...] = (1.0, 2.5)
    ) -> None:
        if upsample % out_size:
            raise ValueError(f"upsample ({upsample}) must be a multiple of out_size ({out_size}).")
        self.upsample, self.out_size, self.orientations, self.scales = upsample, out_size, orientations, tuple(scales)
        self._up = _interp_matrix(8, upsample)
        self._blur = [_gaussian_matrix(upsample, s) for s in self.scales]

    @property
    def output_shape(self) -> tuple[int, int, int]:
        return (1 + self.orientations * len(self.scales), self.out_size, self.out_size)

    def _pool(self, img: np.ndarray) -> np.ndarray:
        k = self.upsample // self.out_size
        return img.reshape(self.out_size, k, self.out_size, k).mean(axis=(1, 3))

    def __call__(self, sample: tuple[Any, Any]) -> tuple[np.ndarray, np.ndarray]:
        x, y = sample
        img = np.asarray(x, dtype=np.float64).reshape(8, 8)
        up = self._up @ img @ self._up.T
        channels = [self._pool(up)]
        for g in self._blur:
            smooth = g @ up @ g.T
            gy, gx = np.gradient(smooth)
            mag = np.hypot(gx, gy)
            # Soft-assign each pixel's orientation (mod pi) to its two nearest bins, by magnitude.
            pos = (np.arctan2(gy, gx) % np.pi) / np.pi * self.orientations
            lo = np.floor(pos).astype(int) % self.orientations
            frac = pos - np.floor(pos)
            for b in range(self.orientations):
                w = mag * ((lo == b) * (1 - frac) + (((lo + 1) % self.orientations) == b) * frac)
                channels.append(self._pool(g @ w @ g.T))  # spatial smoothing of the votes, as in HOG cells
        feats = np.stack(channels)
        # Per-sample normalisation (the classic HOG block norm), so channels have comparable scale.
        feats[1:] /= np.sqrt((feats[1:] ** 2).sum(axis=0, keepdims=True).mean()) + 1e-6
        return feats.astype(np.float32), np.asarray(y, dtype=np.int64)


class DigitsPreprocessedDataModule(PreprocessedDataModule):
    """:class:`PreprocessedDataModule` over the digits split of :class:`DigitsDataModule`.

    Exposes ``image_shape`` and ``num_classes`` so a model can be built before ``setup``.
    """

    num_classes = 10

    def __init__(self, *args: Any, image_shape: tuple[int, int, int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.image_shape = image_shape


def digits_splits(
    val_fraction: float = 0.2, split_seed: int = 0, max_samples: int | None = None
) -> tuple[TensorDataset, TensorDataset]:
    """The raw ``(train, val)`` digits, split exactly like :class:`DigitsDataModule`."""
    x, y = load_digits_tensors()
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(split_seed))
    n_val = int(round(len(x) * val_fraction))
    train = TensorDataset(x[perm[n_val:]], y[perm[n_val:]])
    val = TensorDataset(x[perm[:n_val]], y[perm[:n_val]])
    if max_samples is not None:  # a small slice, for tests and quick benchmarks
        train = TensorDataset(*train[:max_samples])
        val = TensorDataset(*val[: max(1, max_samples // 4)])
    return train, val


def digits_preprocessed_datamodule(
    cache_dir: str | os.PathLike,
    backend: str = "processes",
    batch_size: int = 32,
    num_workers: int = 0,
    *,
    transform: DigitsFeatures | None = None,
    cache: bool = True,
    max_samples: int | None = None,
    **kwargs: Any,
) -> DigitsPreprocessedDataModule:
    """Digits + :class:`DigitsFeatures`, cached with ``backend`` (``"serial"``, ``"processes"``, ``"ray"``).

    Args:
        cache_dir: cache root (``train/`` and ``val/`` inside).
        backend: preprocessing backend.
        batch_size: per-device batch size.
        num_workers: DataLoader workers per process.
        transform: the feature transform (default ``DigitsFeatures()``).
        cache: ``False`` applies the transform on the fly every epoch instead (for comparison).
        max_samples: use only this many training samples (and a quarter as many for validation).
        kwargs: passed to :class:`PreprocessedDataModule` (``preprocess_workers``, ``ray_address``, ...).

    Example::

        dm = digits_preprocessed_datamodule("outputs/cache", backend="ray", batch_size=32, num_workers=0)
    """
    transform = transform or DigitsFeatures()
    train, val = digits_splits(max_samples=max_samples)
    return DigitsPreprocessedDataModule(
        train,
        cache_dir,
        transform,
        val_dataset=val,
        batch_size=batch_size,
        num_workers=num_workers,
        cache=cache,
        backend=backend,
        image_shape=transform.output_shape,
        **kwargs,
    )


__all__ = ["DigitsFeatures", "DigitsPreprocessedDataModule", "digits_preprocessed_datamodule", "digits_splits"]
