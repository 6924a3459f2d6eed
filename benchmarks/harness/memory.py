"""Peak device memory of one arm: started after what earlier arms left is freed, read as the rise above the start."""

from __future__ import annotations

import gc
from typing import Any


def start_peak(device: Any) -> int:
    """Free what earlier arms left (a Trainer holds reference cycles) and start a peak; returns what is allocated.

    Without the collection, a previous fit's model and optimizer state can still be allocated during the next arm
    and count in its peak. On a CPU there is no peak to start: 0.
    """
    gc.collect()
    if device.type != "cuda":
        return 0
    import torch  # here: the launching process of a benchmark need not import torch

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def peak_since(base: int, device: Any) -> int:
    """The peak allocated on ``device`` since :func:`start_peak` returned ``base``, above it (0 on a CPU).

    Example::

        base = start_peak(device)
        fit(...)
        peak = peak_since(base, device)
    """
    if device.type != "cuda":
        return 0
    import torch

    return torch.cuda.max_memory_allocated(device) - base
