"""The Lightning and torch versions the bundle supports, and the features that need newer ones: the one home of
version checks.

The range is the one CI tests: the oldest pair (Lightning 2.5.1 with torch 2.13 on CPU, and the oldest torch by
``scripts/check_compat.sh``) and the newest (``constraints.txt``). A feature that needs more names the version.
"""

from __future__ import annotations

import warnings
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from packaging.version import Version

#: The oldest Lightning (either distribution) the bundle supports: the private APIs it touches are unchanged from here.
LIGHTNING_MIN = "2.5.1"
#: The oldest torch: ``torch.distributed.fsdp.fully_shard`` (``sharded_fsdp2``) is public from 2.6.
TORCH_MIN = "2.6"
#: Lightning's per-step SIGTERM broadcast (``_TrainingEpochLoop._broadcast_sigterm_tensor``) appeared in 2.5.2.
SIGTERM_BROADCAST_SINCE = "2.5.2"


@cache
def installed_version(distribution: str) -> Version | None:
    """The installed version of ``distribution`` (``lightning``, ``pytorch-lightning``, ``torch``), or None."""
    try:
        return Version(version(distribution))
    except PackageNotFoundError:
        return None


def lightning_at_least(minimum: str, distribution: str = "lightning") -> bool:
    """Whether the installed ``distribution`` of Lightning is at least ``minimum``."""
    found = installed_version(distribution)
    return found is not None and found >= Version(minimum)


#: FSDP2 on the CPU (gloo) records events on CPU streams, which torch has from 2.7; torch 2.6 fails inside
#: ``fully_shard``'s first all-gather ("'Stream' object has no attribute 'record_event'", seen with
#: scripts/check_oldest.sh). On CUDA, 2.6 has them.
FSDP2_ON_CPU_SINCE = "2.7"


class UnsupportedTorchError(RuntimeError):
    """A feature needs a newer torch than the one installed; the message names the version."""


def fsdp2_runs_on_cpu() -> bool:
    """Whether this torch's FSDP2 can run on the CPU (its CPU streams record events: torch 2.7 and newer)."""
    import torch

    return hasattr(torch.cpu.Stream, "record_event")


def check_fsdp2_device(device_type: str) -> None:
    """Refuse FSDP2 on the CPU with a torch that cannot run it, naming the version and the alternatives.

    Raises:
        UnsupportedTorchError: ``device_type`` is ``"cpu"`` and this torch's CPU streams cannot record events.
    """
    import torch

    if device_type == "cpu" and not fsdp2_runs_on_cpu():
        raise UnsupportedTorchError(
            f"sharded_fsdp2 (FSDP2Strategy) on the CPU needs torch {FSDP2_ON_CPU_SINCE} or newer"
            f" (FSDP2 records events on CPU streams); this is torch {torch.__version__}. Upgrade torch, train on GPUs,"
            " or use strategy='sharded' (FairScale) or strategy='sharded_zero' (torch ZeRO-1) on the CPU."
        )


#: torch.distributed.checkpoint.save(no_dist=...) is new in torch 2.7; before, a process without a process group is
#: taken for a single-process save on its own (with a warning).
DCP_NO_DIST_SINCE = "2.7"


def dcp_save(state: dict[str, Any], storage_writer: Any, no_dist: bool = False) -> None:
    """``torch.distributed.checkpoint.save`` across the torch range: ``no_dist`` where torch has it."""
    import inspect

    import torch.distributed.checkpoint as dcp

    if "no_dist" in inspect.signature(dcp.save).parameters:
        dcp.save(state, storage_writer=storage_writer, no_dist=no_dist)
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.save(state, storage_writer=storage_writer)
