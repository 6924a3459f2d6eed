"""Datasets and transforms shared by the data tests (and shipped to Ray workers).

Deliberately free of ``lightning_mgpu`` imports: Ray workers import this module by reference.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

#: The reference cache's size: samples, and samples per shard.
N, CHUNK = 200, 16

#: Calls of ``Features.__call__`` in this process (a module global: not part of any fingerprint).
CALLS = {"n": 0}


class IndexedDataset(Dataset):
    """``n`` deterministic samples ``{"x": (3, 4) float32, "y": int, "index": i}``.

    ``fail_at`` / ``kill_at`` make ``__getitem__`` raise or SIGKILL its own process at that
    index; they are attributes, which the dataset fingerprint does not cover, so a rerun
    without them resumes the same cache.
    """

    def __init__(
        self,
        n: int = 200,
        seed: int = 0,
        fail_at: int | None = None,
        kill_at: int | None = None,
        delay_s: float = 0.0,
        pid_dir: str | None = None,
    ) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal((n, 3, 4)).astype(np.float32)
        self.y = rng.integers(0, 10, n)
        self.fail_at, self.kill_at = fail_at, kill_at
        self.delay_s, self.pid_dir = delay_s, pid_dir  # slow samples; a file per process that read one

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if i == self.fail_at:
            raise ValueError(f"simulated failure at {i}")
        if self.pid_dir is not None:
            (Path(self.pid_dir) / str(os.getpid())).touch()
        if self.delay_s:
            time.sleep(self.delay_s)
        return {"x": self.x[i], "y": int(self.y[i]), "index": i}


class Features:
    """A deterministic transform: ``{"feat": tanh(scale * x @ w) (3, 5), "y", "index"}``."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.w = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        CALLS["n"] += 1
        feat = np.tanh(self.scale * sample["x"] @ self.w).astype(np.float32)
        return {"feat": feat, "y": sample["y"], "index": sample["index"]}


class NoisyFeatures(Features):
    """Not deterministic: what ``preprocess`` warns about."""

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        out = super().__call__(sample)
        out["feat"] = out["feat"] + np.random.rand(*out["feat"].shape).astype(np.float32)
        return out


def tuple_transform(sample: dict[str, Any]) -> tuple[np.ndarray, int]:
    return sample["x"] * 2, sample["y"]


def _refuse_unpickle() -> None:
    raise ImportError("simulated: this dataset's module is not importable in the worker")


class UnpicklableInWorkers(IndexedDataset):
    """Pickles fine in the driver, but unpickling it (in a worker) raises, like a notebook class."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_refuse_unpickle, ())
