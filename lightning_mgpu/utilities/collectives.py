"""Gather small, gradient-free tensors from every rank, whatever the strategy."""

from __future__ import annotations

from typing import Any

import torch


def gather_rows(strategy: Any, tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor``, stacked in rank order: ``(world_size, *tensor.shape)``, on every rank.

    Where torch.distributed's default group is the whole job, it is called directly: Lightning's ``all_gather``
    goes through the autograd-aware ``torch.distributed.nn.functional.all_gather``, which torch 2.13 deprecates
    (a warning on each call), and nothing gathered here needs a gradient. Strategies with their own collectives
    (Horovod) use theirs; one process (``dp``) gathers nothing.

    Args:
        strategy: the Lightning strategy (``trainer.strategy``).
        tensor: this rank's tensor, on the strategy's device; the same shape on every rank.

    Example::

        rows = gather_rows(trainer.strategy, torch.tensor([loss, seconds]))  # (world_size, 2)
    """
    world = strategy.world_size
    if world == 1:
        return tensor.unsqueeze(0)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() == world:
        parts = [torch.empty_like(tensor) for _ in range(world)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)
    # DDP-style strategies stack to (world, ...); Horovod-style allgather concatenates along dim 0.
    return strategy.all_gather(tensor).reshape(world, *tensor.shape)
