"""Lightning's child-process observer, told to stand down once the job is stopping on purpose.

Under Lightning's own ``ddp`` (and every strategy that starts its ranks with ``_SubprocessScriptLauncher``), rank 0
runs a thread that polls the other ranks every 5 s and, once one has exited non-zero, SIGKILLs every process of the
job, rank 0 included. After a Ctrl-C, Lightning itself SIGKILLs the other ranks and then exits rank 0. Should the
thread wake before rank 0 is gone (a logger flushing, ``atexit`` handlers, a checkpoint landing), it kills rank 0 in
the middle of its exit: the job ends with -9 instead of its exit code, and whatever was still being written is cut off.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


def stop_child_observer(launcher: Any) -> bool:
    """Keep Lightning's child-process observer from killing this process while it stops after a Ctrl-C.

    The observer thread holds the launcher's own list of child processes. The launcher gets a copy, so that Lightning's
    ``launcher.kill`` still reaches every child, and the thread's list is emptied: with nothing left to watch, its next
    check finds every child fine and it ends without a signal.

    Args:
        launcher: ``trainer.strategy.launcher``; anything without a list of child processes is left alone.

    Returns:
        Whether there were children to take from the observer (only in rank 0 of a job that started them).

    Example::

        def on_exception(self, trainer, pl_module, exception):
            if isinstance(exception, KeyboardInterrupt):
                stop_child_observer(trainer.strategy.launcher)
    """
    procs = getattr(launcher, "procs", None)
    if not isinstance(procs, list) or not procs:
        return False
    launcher.procs = list(procs)
    procs.clear()
    return True


@contextlib.contextmanager
def child_observer_paused(launcher: Any) -> Iterator[None]:
    """Keep Lightning's child-process observer from killing the job inside this block, and give it its children back
    when the block succeeds (the job is then watched as before; after a failure it is not: this rank is exiting).

    Used around the process-group rendezvous: when it cannot complete, every rank fails within the bound on its own
    and says why; the observer would otherwise SIGKILL the launching rank as soon as another rank had exited, before it
    could print its own message. A rank that dies meanwhile is still noticed: the others' rendezvous fails in bound.

    Args:
        launcher: ``trainer.strategy.launcher``; anything without a list of child processes is left alone.
    """
    watched = getattr(launcher, "procs", None)
    if not isinstance(watched, list) or not watched:
        yield
        return
    children = list(watched)
    launcher.procs = children  # Lightning's own kill still reaches every child
    watched.clear()  # the observer thread's list: nothing to watch, nothing to kill
    yield  # on an exception the observer stays idle: this rank is failing and says why, then exits itself
    watched.extend(children)
    launcher.procs = watched
    _keep_watching(watched)


def _keep_watching(children: list) -> None:
    """An observer on ``children`` again: the paused one ended if it woke to an empty list (it finishes once every
    child it sees is fine), so a new one takes over; one that is still asleep simply goes on."""
    for thread in threading.enumerate():
        if getattr(thread, "_child_processes", None) is children and not getattr(thread, "_finished", True):
            return
    from lightning.fabric.strategies.launchers.subprocess_script import _launch_process_observer

    _launch_process_observer(children)
