"""Time marks on a device that runs asynchronously, and the step clock every Lightning arm of the suite times with."""

from __future__ import annotations

import time
from typing import Any


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously), so that a time mark follows it; nothing on CPU."""
    if device.type == "cuda":
        import torch  # here: the launching process of a benchmark need not import torch

        torch.cuda.synchronize(device)


def step_clock(device: Any = None) -> Any:
    """A Lightning callback whose ``marks`` are the start of every training batch and ``ends`` the end of each, every
    one after ``device``'s queued work.

    ``harness.stats.median_interval(clock.marks, warmup, steps)`` is then the median step, everything Lightning does
    between batches included; ``median_duration(clock.marks, clock.ends, warmup)`` the median batch from its start
    hook to its end hook. Built on call, so that this module imports without Lightning (a launching process).

    Example::

        clock = step_clock(torch.device("cuda", 0))
        pl.Trainer(callbacks=[clock], ...).fit(model)
        step_s = median_interval(clock.marks, warmup=3, steps=20)
    """
    import lightning.pytorch as pl

    class StepClock(pl.Callback):
        def __init__(self) -> None:
            self.marks: list[float] = []
            self.ends: list[float] = []

        def _now(self) -> float:
            if device is not None:
                synchronize(device)
            return time.perf_counter()

        def on_train_batch_start(self, *_: Any) -> None:
            self.marks.append(self._now())

        def on_train_batch_end(self, *_: Any) -> None:
            self.ends.append(self._now())

    return StepClock()
