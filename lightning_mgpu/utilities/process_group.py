"""The job's process group: which data-parallel rank this process is, and how it leaves the group (destroyed
after success, never during a failure).

A process that exits with its gloo group alive can abort at interpreter shutdown ("terminate called without
an active exception", SIGABRT) while gloo's threads still hold work: a finished job then reports a failure.
torch documents that each trainer process should call ``destroy_process_group()`` when done (pytorch#122358);
torchtitan does it only after success, since destroying while other ranks are inside a collective can hang.

Destroying is not enough under gloo: ``destroy_process_group()`` only unregisters the groups (gloo's backend has no
``shutdown()``), and the threads live on while any object still holds the group. The sharded engines do:
FairScale's ``OSS.group`` and a default argument, torch's ``ZeroRedundancyOptimizer.process_group``, FSDP2's
``DeviceMesh``, and an async save's own group. The group was then torn down during interpreter finalization, which
aborts now and then. So the references to the destroyed groups are dropped too (:func:`release_destroyed_groups`).
"""

from __future__ import annotations

import atexit
import gc
import multiprocessing
import os
import sys
import weakref
from types import CellType, FunctionType
from typing import Any, NoReturn

import torch

_state = {"failed": False, "registered": False}


#: The first torch whose NCCL is safe to bind eagerly: passing ``device_id`` to ``init_process_group`` hung collectives
#: at random on 2.6 and 2.7.0 (pytorch#153960, the non-blocking communicator path); 2.7.1 carries the fix.
EAGER_NCCL_SAFE_SINCE = (2, 7, 1)


def init_device_id(backend: str, device: torch.device | None) -> torch.device | None:
    """The ``device_id`` to give ``init_process_group`` for ``backend`` on ``device``, or ``None`` to leave it out.

    NCCL on a CUDA device gets it: torch 2.15's default ProcessGroupNCCL2 infers the device from the rank without it
    and fails with "Duplicate GPU detected" where ranks and devices do not line up (meta-pytorch/torchrec#4666), and it
    binds the communicator to this rank's GPU up front. Leave it out for gloo, for the CPU, and on a torch older than
    :data:`EAGER_NCCL_SAFE_SINCE`, where it could hang.

    Args:
        backend: the process-group backend (``"nccl"``, ``"nccl-legacy"``, ``"cpu:gloo,cuda:nccl"``, ``"gloo"``, ...).
        device: this rank's device (the strategy's ``root_device``).
    """
    if device is None or device.type != "cuda" or "nccl" not in backend:
        return None
    if torch_release() < EAGER_NCCL_SAFE_SINCE:
        return None
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def torch_release() -> tuple[int, int, int]:
    """The installed torch's release numbers (``2.7.1+cu126`` -> ``(2, 7, 1)``)."""
    from packaging.version import Version

    release = Version(torch.__version__).release
    return (*release, 0, 0)[:3]  # type: ignore[return-value]


def in_spawned_worker() -> bool:
    """Whether this process was started by ``multiprocessing``/``torch.multiprocessing`` (a ``*_spawn`` worker)."""
    return multiprocessing.parent_process() is not None


def mark_failed() -> None:
    """This process failed: leave the group alone at exit (other ranks may be inside a collective)."""
    _state["failed"] = True


def destroy_process_group_if_done(release: bool = True) -> bool:
    """Destroy the default process group if it exists and this process has not failed; whether it did.

    Failed: marked so (:func:`mark_failed`), or ending on an uncaught exception (``sys.last_value`` is set before the
    exit handlers run).

    Args:
        release: also drop what still holds the destroyed groups (:func:`release_destroyed_groups`). A process that
            ends with ``os._exit`` next runs no destructors and can skip that scan.
    """
    import torch.distributed as dist

    if _state["failed"] or getattr(sys, "last_value", None) is not None:
        return False
    if not (dist.is_available() and dist.is_initialized()):
        return False
    destroy_all_groups(release)
    return True


def destroy_all_groups(release: bool = True) -> None:
    """``destroy_process_group()``, then (``release``) drop what still holds the destroyed groups, whatever the state
    of this process. Callers that must not destroy after a failure use :func:`destroy_process_group_if_done`."""
    import torch.distributed as dist

    # Every group (the default one and those made by new_group), weakly: destroy_process_group() destroys them all.
    world = getattr(dist.distributed_c10d, "_world", None)
    groups = [weakref.ref(pg) for pg in getattr(world, "pg_map", None) or [dist.group.WORLD]]
    dist.destroy_process_group()
    if release:
        release_destroyed_groups(groups)


def release_destroyed_groups(groups: list[weakref.ref[Any]]) -> int:
    """Drop what still holds the destroyed ``groups``, so that each one's C++ side (gloo's threads) ends now, while the
    interpreter is whole; how many references were dropped.

    Dropped, to ``None``: object attributes, dict values, function defaults and closure variables. FairScale binds
    ``dist.group.WORLD`` as a default argument when it is imported after ``init_process_group``
    (``oss._broadcast_object``), FSDP2's ``DeviceMesh`` keeps its groups in a dict, the optimizers in an attribute. A
    destroyed group is unusable by torch's contract, so nothing loses a working group. Lists, tuples and C++ holders
    (DDP's reducer) are left alone.

    Workaround: remove when gloo's ``shutdown()`` ends its threads, so that ``destroy_process_group()`` alone suffices
    (check: ``tests/unit/utilities/test_process_group.py`` without this call).
    """
    alive = {id(pg): pg for ref in groups if (pg := ref()) is not None}
    if not alive:
        return 0
    released = 0
    # Types are read with type(), never isinstance() or getattr(): those go through an object's __class__ and
    # __getattribute__, and some objects warn or compute there (torch.distributed.reduce_op warns: deprecated).
    for holder in gc.get_objects():
        kind = type(holder)
        # A default argument: the defaults tuple is tracked or not depending on whether a collection has run since.
        if kind is FunctionType and any(id(d) in alive for d in holder.__defaults__ or ()):
            holder.__defaults__ = tuple(None if id(d) in alive else d for d in holder.__defaults__ or ())
            released += 1
        elif kind is CellType and id(_cell_contents(holder)) in alive:  # a closure's variable
            holder.cell_contents = None
            released += 1
        parts = gc.get_referents(holder)
        # Dicts: this one, and those it holds that gc.get_objects() does not list (holding only untracked objects, such
        # as FSDP2's DeviceMesh._pg_registry, they are untracked).
        mappings = [part for part in parts if type(part) is dict and not gc.is_tracked(part)]
        if issubclass(kind, dict):
            mappings.append(holder)
        elif not issubclass(kind, type) and any(id(part) in alive for part in parts):
            # An object whose attributes are stored inline (Python 3.11+) refers to the group itself, not via a dict.
            # Written into __dict__, past any __setattr__ (a frozen dataclass's refuses).
            try:
                mappings.append(object.__getattribute__(holder, "__dict__"))
            except (AttributeError, TypeError):  # no __dict__ (slots, a C type): nothing to write into
                pass
        for mapping in mappings:
            # dict's own methods: a subclass may compute its items (transformers' lazy auto-mappings import models).
            for key in [k for k, v in dict.items(mapping) if id(v) in alive]:
                dict.__setitem__(mapping, key, None)
                released += 1
    return released


def _cell_contents(cell: CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def end_after_success() -> NoReturn:
    """End a process whose work is done and delivered: leave the group, flush the output, ``os._exit(0)``.

    Workaround: with torch 2.13 and gloo a process can still abort in C++ static destructors at interpreter exit
    ("terminate called without an active exception", SIGABRT), even after ``destroy_process_group()`` (seen in FSDP2
    ranks, whose DeviceMesh stays cached; pytorch#179291). Nothing is left to do, so the process ends before them.
    The cause found since (the engines keep the destroyed group alive) is what :func:`release_destroyed_groups` treats
    at an ordinary exit. Remove when a looped check shows spawned workers ending cleanly with that alone, or when a
    torch release ends gloo processes cleanly (check: the sharded_checkpoint benchmark, looped under load).
    """
    destroy_process_group_if_done(release=False)  # an orderly goodbye for the other ranks, not a reset connection
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
