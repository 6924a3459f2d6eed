"""Lightning's child-process observer, told to stand down once the job is stopping on purpose.

Under Lightning's own ``ddp`` (and every strategy that starts its ranks with ``_SubprocessScriptLauncher``), rank 0
runs a thread that polls the other ranks every 5 s and, once one has exited non-zero, SIGKILLs every process of the
job, rank 0 included. After a Ctrl-C, Lightning itself SIGKILLs the other ranks and then exits rank 0. Should the
thread wake before rank 0 is gone (a logger flushing, ``atexit`` handlers, a checkpoint landing), it kills rank 0 in
the middle of its exit: the job ends with -9 instead of its exit code, and whatever was still being written is cut off.
"""

from __future__ import annotations

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
