"""Time marks on a device that runs asynchronously, and the step clock every Lightning arm of the suite times with."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously), so that a time mark follows it; nothing on CPU."""
    if device.type == "cuda":
        import torch  # here: the launching process of a benchmark need not import torch

        torch.cuda.synchronize(device)


def now(device: Any = None) -> float:
    """``time.perf_counter()`` once ``device``'s queued work is done."""
    if device is not None:
        synchronize(device)
    return time.perf_counter()


def timed(fn: Callable[[], Any], device: Any = None) -> float:
    """Seconds ``fn()`` takes, the work it queued on ``device`` included."""
    start = now(device)
    fn()
    return now(device) - start


def raw_steps(
    step: Callable[[Any, Any], Any], batches: Iterable[Any], count: int, device: Any
) -> tuple[list[float], list[float]]:
    """A raw loop's clock: ``step(x, y)`` on the first ``count`` ``(x, y)`` batches, moved to ``device``.

    Returns the wall-clock and process-CPU marks of every step's start and of the last step's end, each after the
    device's queued work: ``median_interval(marks, warmup, steps)`` is the loop's median step, the data fetch included.

    Example::

        wall, _ = raw_steps(lambda x, y: train(x, y), loader, warmup + steps + 1, device)
        step_s = median_interval(wall, warmup, steps)
    """
    wall: list[float] = []
    cpu: list[float] = []

    def mark() -> None:
        wall.append(now(device))
        cpu.append(time.process_time())

    for _, (x, y) in zip(range(count), batches):  # range first: no batch is drawn past the last step
        mark()
        step(x.to(device), y.to(device))
    mark()
    return wall, cpu


def step_clock(device: Any = None) -> Any:
    """A Lightning callback whose ``marks`` are the start of every training batch and ``ends`` the end of each, every
    one after ``device``'s queued work; ``cpu_marks`` and ``cpu_ends`` are the same in the process's CPU time.

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
            self.cpu_marks: list[float] = []
            self.ends: list[float] = []
            self.cpu_ends: list[float] = []

        def on_train_batch_start(self, *_: Any) -> None:
            self.marks.append(now(device))
            self.cpu_marks.append(time.process_time())

        def on_train_batch_end(self, *_: Any) -> None:
            self.ends.append(now(device))
            self.cpu_ends.append(time.process_time())

    return StepClock()
