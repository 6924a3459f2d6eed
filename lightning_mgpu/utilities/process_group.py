"""The job's process group: which data-parallel rank this process is, and how it leaves the group (destroyed
after success, never during a failure).

A process that exits with its gloo group alive can abort at interpreter shutdown ("terminate called without
an active exception", SIGABRT) while gloo's threads still hold work: a finished job then reports a failure.
torch documents that each trainer process should call ``destroy_process_group()`` when done (pytorch#122358);
torchtitan does it only after success, since destroying while other ranks are inside a collective can hang.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import sys
from typing import NoReturn

import torch

_state = {"failed": False, "registered": False}


def in_spawned_worker() -> bool:
    """Whether this process was started by ``multiprocessing``/``torch.multiprocessing`` (a ``*_spawn`` worker)."""
    return multiprocessing.parent_process() is not None


def mark_failed() -> None:
    """This process failed: leave the group alone at exit (other ranks may be inside a collective)."""
    _state["failed"] = True


def destroy_process_group_if_done() -> bool:
    """Destroy the default process group if it exists and this process has not failed; whether it did.

    Failed: marked so (:func:`mark_failed`), or ending on an uncaught exception (``sys.last_value`` is set before the
    exit handlers run).
    """
    import torch.distributed as dist

    if _state["failed"] or getattr(sys, "last_value", None) is not None:
        return False
    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.destroy_process_group()
    return True


def end_after_success() -> NoReturn:
    """End a process whose work is done and delivered: leave the group, flush the output, ``os._exit(0)``.

    Workaround: with torch 2.13 and gloo a process can still abort in C++ static destructors at interpreter exit
    ("terminate called without an active exception", SIGABRT), even after ``destroy_process_group()`` (seen in FSDP2
    ranks, whose DeviceMesh stays cached; pytorch#179291). Nothing is left to do, so the process ends before them.
    Remove when a torch release ends gloo processes cleanly (check: the sharded_checkpoint benchmark, looped under load).
    """
    destroy_process_group_if_done()  # let the other ranks see an orderly goodbye, not a reset connection
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def destroy_at_exit() -> None:
    """Register (once per process) an exit handler that runs :func:`destroy_process_group_if_done`.

    It runs while the interpreter is still whole, before the module teardown that aborts.
    """
    if not _state["registered"]:
        _state["registered"] = True
        atexit.register(destroy_process_group_if_done)


def data_parallel_rank_and_size() -> tuple[int, int] | None:
    """This process's rank and the number of data-parallel processes, or ``None`` outside a job of processes.

    torch.distributed's default group (ddp, sharded) or an initialized Horovod (which runs without torch.distributed).
    A job of one process counts (``(0, 1)``): Lightning still swaps a plain ``DistributedSampler`` into its loaders
    (ddp on one device), and that one replays epoch 0's order after a resume. Horovod is consulted only if something
    already imported it, so this never imports it.
    """
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    hvd = sys.modules.get("horovod.torch")
    if hvd is not None and hvd.is_initialized():
        return hvd.rank(), hvd.size()
    return None
