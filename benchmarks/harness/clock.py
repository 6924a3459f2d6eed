"""Time marks on a device that runs asynchronously."""

from __future__ import annotations

from typing import Any


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously), so that a time mark follows it; nothing on CPU."""
    if device.type == "cuda":
        import torch  # here: the launching process of a benchmark need not import torch

        torch.cuda.synchronize(device)
