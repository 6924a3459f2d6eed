"""The FSDP2 side of the ``sharded`` strategy: torch's ``fully_shard`` (ZeRO-2, or ZeRO-3), with plain checkpoints.

``fully_shard`` is applied per block, then to the root (torchtitan's recipe): each block's parameters are gathered
just before it runs, and its gradients reduce-scattered as soon as its backward finishes. Parameters become DTensors
sharded over one mesh dimension; the optimizer built after it holds only this rank's shard of its state.

Checkpoints stay the bundle's format: full model keys and the ordinary, index-keyed optimizer state, gathered to
rank 0 (torch.distributed.checkpoint's ``get_*_state_dict`` with ``full_state_dict``), so they load under ``ddp``,
``dp``, the other backends and any number of ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import torch
from torch import nn
from torch.optim import Optimizer

from lightning_mgpu.utilities.modules import ModuleSpec, select_modules

__all__ = ["apply_fully_shard", "full_optimizer_state", "is_fully_sharded", "load_full_optimizer_state", "no_sync"]

# The LightningModule methods Lightning calls instead of forward: FSDP2 must gather the root's parameters for them.
_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


def apply_fully_shard(
    module: nn.Module, world_size: int, device_type: str, reshard_after_forward: bool, blocks: Optional[list[ModuleSpec]]
) -> list[str]:
    """Shard ``module`` in place with FSDP2: each chosen block, then the root. Returns the blocks' names.

    Args:
        module: the LightningModule, on its device, with the same weights on every rank.
        world_size: ranks in the (single) mesh dimension.
        device_type: ``"cpu"`` (gloo) or ``"cuda"``.
        reshard_after_forward: ``False`` keeps gathered parameters from forward to backward (ZeRO-2); ``True`` frees
            them after forward and gathers again in backward (ZeRO-3: less memory, one more all-gather).
        blocks: which submodules get their own ``fully_shard`` (classes, name patterns or predicates). ``None``:
            every submodule that holds parameters of its own (a Linear, a Conv, a norm layer).

    Raises:
        ValueError: an entry of ``blocks`` matches no submodule.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    mesh = init_device_mesh(device_type, (world_size,))
    if blocks is None:
        chosen = [(n, m) for n, m in module.named_modules() if n and any(True for _ in m.parameters(recurse=False))]
    else:
        chosen = select_modules(module, blocks, owner="ShardedStrategy(fsdp_modules=...)")
    # Innermost first: a block nested in another chosen block must be sharded before its parent.
    for _, block in sorted(chosen, key=lambda item: item[0].count("."), reverse=True):
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward)
    for name in _STEP_METHODS:
        if callable(getattr(module, name, None)):
            register_fsdp_forward_method(module, name)
    return [name for name, _ in chosen]


def is_fully_sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


@contextmanager
def no_sync(module: nn.Module) -> Iterator[None]:
    """Accumulate gradients locally: no reduce-scatter in the backward passes inside (non-final micro-batches)."""
    module.set_requires_gradient_sync(False)  # type: ignore[operator]
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)  # type: ignore[operator]


def _options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kwargs)


def full_model_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state with plain keys, on CPU, on rank 0 (``{}`` elsewhere). A collective."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(full_state_dict=True, cpu_offload=True))


def load_full_model_state(module: nn.Module, state: dict[str, Any], strict: bool = True) -> None:
    """Load a whole (unsharded) state dict with plain keys; every rank keeps its shard."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(module, state, options=_options(full_state_dict=True, strict=strict))


def _param_names(module: nn.Module, optimizer: Optimizer) -> list[list[str]]:
    names = {id(p): n for n, p in module.named_parameters()}
    return [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]


def full_optimizer_state(module: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
    """The optimizer's whole state in torch's ordinary format (integer ids, in param-group order), on rank 0.

    torch.distributed.checkpoint keys the state by parameter name; the bundle's checkpoints use the ids every plain
    optimizer's ``load_state_dict`` expects. A collective; ``{}`` on the other ranks.
    """
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    by_name = get_optimizer_state_dict(module, optimizer, options=_options(full_state_dict=True, cpu_offload=True))
    if not by_name:
        return {}
    index: dict[str, int] = {}
    groups = []
    for group in by_name["param_groups"]:
        ids = []
        for name in group["params"]:
            index.setdefault(name, len(index))
            ids.append(index[name])
        groups.append({**group, "params": ids})
    return {"state": {index[name]: value for name, value in by_name["state"].items()}, "param_groups": groups}


def load_full_optimizer_state(module: nn.Module, optimizer: Optimizer, state: dict[str, Any]) -> None:
    """Load an ordinary (index-keyed, unsharded) optimizer state; every rank keeps its shard of it.

    Raises:
        ValueError: the saved state has a different number of parameters per group than the optimizer.
    """
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    names = _param_names(module, optimizer)
    saved_groups = state["param_groups"]
    if [len(g) for g in names] != [len(g["params"]) for g in saved_groups]:
        raise ValueError(
            f"the checkpoint's optimizer has {[len(g['params']) for g in saved_groups]} parameters per group, this one"
            f" {[len(g) for g in names]}: it was saved for another model or optimizer configuration."
        )
    name_of = {pid: name for group, saved in zip(names, saved_groups) for name, pid in zip(group, saved["params"])}
    by_name = {
        "state": {name_of[pid]: value for pid, value in state["state"].items() if pid in name_of},
        "param_groups": [{**saved, "params": group} for group, saved in zip(names, saved_groups)],
    }
    set_optimizer_state_dict(module, optimizer, by_name, options=_options(full_state_dict=True))
