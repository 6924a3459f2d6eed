"""Glue for torchrun's elastic restarts (``--max-restarts``): each restarted round gets process-group keys of its own.

torchrun (c10d rendezvous, torch 2.13) keeps one TCPStore for all rounds of a job and gives the restarted workers
the same ``MASTER_PORT``. ``init_process_group`` writes and reads the same keys in every round, so a restarted
worker can read the dead round's gloo addresses and wait on them: 30 minutes by default, or fail to connect. Under
a restart, :func:`init_process_group_for_restart` creates the default process group on the same store under a
per-round prefix before Lightning does; Lightning then finds it initialised and uses it. The first round is left to
Lightning as it is.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from lightning_mgpu.utilities.process_group import init_device_id


def restart_round() -> int:
    """How many times torchrun has restarted the workers (``TORCHELASTIC_RESTART_COUNT``); 0 outside torchrun."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def _backend_of(strategy: Any) -> str:
    get = getattr(strategy, "_get_process_group_backend", None)
    if callable(get):
        return str(get())
    return (
        "nccl" if getattr(strategy, "root_device", None) is not None and strategy.root_device.type == "cuda" else "gloo"
    )


def init_process_group_for_restart(strategy: Any) -> bool:
    """In a round torchrun restarted, create the default process group on keys of this round; whether it did.

    Call it after building the ``Trainer`` and before ``fit``; it does nothing outside a torchrun restart, when
    torchrun's agent store is not shared with the workers (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``), or when a
    group already exists.

    Args:
        strategy: the Trainer's strategy (``trainer.strategy``): its process-group backend and timeout are used.

    Example::

        trainer = pl.Trainer(strategy="ddp", ...)
        init_process_group_for_restart(trainer.strategy)  # a no-op unless torchrun restarted this worker
        trainer.fit(model, ckpt_path=...)
    """
    import torch.distributed as dist

    attempt = restart_round()
    if (
        attempt == 0
        or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
        or not dist.is_available()
        or dist.is_initialized()
    ):
        return False
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = getattr(strategy, "_timeout", None) or timedelta(minutes=30)
    # A client of the agent's store, as torch's env:// rendezvous makes; only the key prefix differs.
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False, timeout=timeout
    )
    backend = _backend_of(strategy)
    # NCCL binds to this rank's GPU up front, as Lightning's own ddp does, where that is safe (init_device_id).
    device_id = init_device_id(backend, getattr(strategy, "root_device", None))
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"lightning_mgpu/restart_{attempt}", store),
        rank=rank,
        world_size=world_size,
        timeout=timeout,
        device_id=device_id,
    )
    rank_zero_info(f"torchrun restart {attempt}: process group ({backend}) on this round's own keys")
    return True
