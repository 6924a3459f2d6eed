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
        UnsupportedTorchError: the CPU, with a torch whose FSDP2 cannot run there (``_compat.FSDP2_ON_CPU_SINCE``).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    from lightning_mgpu.utilities._compat import check_fsdp2_device

    check_fsdp2_device(device_type)
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


#: Set to 1 to gather full checkpoints with ``DTensor.full_tensor`` everywhere (0: never; unset: only where needed).
GATHER_ENV = "LIGHTNING_MGPU_FSDP2_FULL_TENSOR_GATHER"


def gathers_by_hand(module: nn.Module) -> bool:
    """Whether full checkpoints are gathered tensor by tensor with plain ``all_gather`` (:func:`whole_tensor`) instead
    of torch.distributed.checkpoint's ``full_state_dict`` (``DTensor.redistribute``).

    Two cases need it, both seen on an H100 (torch 2.11), where DCP's gather died with SIGSEGV in ``wait_tensor``:

    - the shards are no longer on the mesh's device: Lightning's ``Strategy.teardown`` moves the model to the CPU
      after ``fit``, so a ``trainer.save_checkpoint`` after ``fit`` finds CPU shards on a CUDA mesh;
    - gloo carries the CUDA mesh (several ranks sharing one GPU).
    """
    import os

    import torch.distributed as dist

    forced = os.environ.get(GATHER_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    param = next(iter(module.parameters()), None)
    mesh = getattr(param, "device_mesh", None)
    if mesh is None or not dist.is_initialized():
        return False
    if param.device.type != mesh.device_type:
        return True
    return mesh.device_type == "cuda" and cuda_backend(mesh.get_group()) == "gloo"


def cuda_backend(group: Any = None) -> str:
    """The backend that carries CUDA tensors in ``group`` (default: the world): "nccl", "gloo", ...

    ``get_backend`` gives one name ("gloo") or one per device type ("cpu:gloo,cuda:nccl").
    """
    import torch.distributed as dist

    backend = str(dist.get_backend(group))
    if ":" not in backend:
        return backend
    per_device = dict(item.split(":", 1) for item in backend.split(","))
    return per_device.get("cuda", "")


def whole_tensor(value: Any) -> torch.Tensor:
    """The whole tensor of a DTensor sharded over a 1-D mesh (FSDP2's ``Shard(0)``), by a plain ``all_gather`` of the
    padded local shards; a replicated DTensor's local tensor; anything else through ``full_tensor()``. A collective.

    The shards travel on their own device where the group's backend takes it (gloo: CPU or CUDA), else on the current
    CUDA device (NCCL), so CPU shards on a CUDA mesh gather too.
    """
    import torch.distributed as dist

    mesh, placement = value.device_mesh, value.placements[0]
    local = value.to_local()
    if mesh.ndim != 1:
        return value.full_tensor()
    if placement.is_replicate():
        return local
    if not placement.is_shard():
        return value.full_tensor()
    dim, group, world = placement.dim, mesh.get_group(), mesh.size()
    # DTensor's Shard splits as torch.chunk does: equal chunks, the last ones smaller or absent.
    sizes = [chunk.size(dim) for chunk in torch.empty(value.shape, device="meta").chunk(world, dim)]
    sizes += [0] * (world - len(sizes))
    on_gloo = (cuda_backend(group) if mesh.device_type == "cuda" else str(dist.get_backend(group))) == "gloo"
    device = local.device if on_gloo or mesh.device_type != "cuda" else torch.device("cuda", torch.cuda.current_device())
    shape = list(value.shape)
    shape[dim] = max(sizes)
    padded = torch.zeros(shape, dtype=local.dtype, device=device)
    padded.narrow(dim, 0, local.size(dim)).copy_(local)
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    return torch.cat([part.narrow(dim, 0, size) for part, size in zip(gathered, sizes)], dim)


def _gather_full(state: dict[str, Any]) -> dict[str, Any]:
    """Every DTensor in ``state`` (nested) made whole, on CPU, on rank 0; ``{}`` elsewhere. A collective per DTensor,
    in the same order on every rank (dicts keep insertion order); one whole tensor at a time is held."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    rank0 = dist.get_rank() == 0

    def whole(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: whole(item) for key, item in value.items()}
        if isinstance(value, list):
            return [whole(item) for item in value]
        if isinstance(value, DTensor):
            value = whole_tensor(value)
        return value.detach().cpu() if isinstance(value, torch.Tensor) and rank0 else value

    gathered = whole(state)
    return gathered if rank0 else {}


def full_model_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state with plain keys, on CPU, on rank 0 (``{}`` elsewhere). A collective."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    if gathers_by_hand(module):
        return _gather_full(get_model_state_dict(module, options=_options(full_state_dict=False)))
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

    if gathers_by_hand(module):
        by_name = _gather_full(get_optimizer_state_dict(module, optimizer, options=_options(full_state_dict=False)))
    else:
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
