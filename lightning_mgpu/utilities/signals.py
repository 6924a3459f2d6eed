"""Ctrl-C in a process that only waits for its spawned workers.

A terminal's Ctrl-C reaches every process of the foreground group: the launching process of ``*_spawn`` as well as
its workers. If the launcher dies of it, torch.multiprocessing's daemonic workers are killed with it, before they
can save (``SaveOnInterrupt``). :func:`interrupts_to_workers` lets the workers handle the first Ctrl-C while the
launcher keeps waiting for them, and passes the signal on to them, for where only the launcher gets it (a notebook
kernel's interrupt); a worker counts signals less than a second apart as one. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger(__name__)


@dataclass
class Interrupts:
    """How many Ctrl-C this process received while the workers ran."""

    count: int = 0


def spawned_worker_pids() -> list[int]:
    """Live children of this process started by ``torch.multiprocessing.start_processes`` (not pools or Ray)."""
    from torch.multiprocessing.spawn import _wrap

    return [p.pid for p in multiprocessing.active_children() if getattr(p, "_target", None) is _wrap and p.pid]


@contextmanager
def interrupts_to_workers() -> Iterator[Interrupts]:
    """Within the block, the first SIGINT is left to the workers; the second raises ``KeyboardInterrupt`` here.

    A Python handler, not ``SIG_IGN``: an ignored signal stays ignored in processes started from this one, and the
    workers must receive it.

    Example::

        with interrupts_to_workers() as interrupts:
            torch.multiprocessing.start_processes(...)
        if interrupts.count:
            ...  # the workers stopped because of Ctrl-C
    """
    record = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield record
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        record.count += 1
        if record.count > 1:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        log.warning("Ctrl-C: the workers finish their step, save and stop; press Ctrl-C again to stop at once.")
        for pid in spawned_worker_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield record
    finally:
        if signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, previous)


@contextmanager
def restored_signal_handlers(signums: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Put this process's handlers of ``signums`` back as they were, after a block that replaces them for good.

    ``horovod.run`` and ``ray.init`` both install SIGINT/SIGTERM handlers in the calling process and leave them there.
    Example::

        with restored_signal_handlers():
            horovod.run(fn, np=2, use_gloo=True)
    """
    saved = {s: signal.getsignal(s) for s in signums}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:  # None: installed outside Python, cannot be put back
                signal.signal(s, handler)
