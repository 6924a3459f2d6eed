"""FSDP2's model and optimizer state in the bundle's checkpoint layout: plain model keys, torch's optimizer format.

``"sharded"`` (the default): every rank writes its own shards into a folder (``checkpoint/sharded.py``),
nothing is gathered; ``"full"``: gathered to rank 0 into one file. Both load under ``ddp``, ``dp``, the other sharded
strategies and any number of ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from lightning_mgpu.checkpoint.keys import ids_from_names, names_from_ids
from lightning_mgpu.checkpoint.sharded import (
    check_saved_optimizer_count,
    folder_reader,
    load_planner,
    match_saved_group_options,
    saved_entries,
    split_checkpoint,
)

__all__ = [
    "full_model_state",
    "full_optimizer_state",
    "load_full_model_state",
    "load_full_optimizer_state",
    "load_sharded_checkpoint",
    "sharded_model_state",
    "sharded_optimizer_state",
]


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

    Remove when DCP's ``full_state_dict`` gather survives both (recheck with ``benchmarks/gpu_check.sh`` on each torch
    release: the run prints which gather each save took); this costs one ``all_gather`` per tensor, as DCP's does.
    """
    import os

    import torch.distributed as dist

    forced = os.environ.get(GATHER_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    param = next(iter(module.parameters()), None)
    mesh = getattr(param, "device_mesh", None)
    if param is None or mesh is None or not dist.is_initialized():
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
    device = (
        local.device if on_gloo or mesh.device_type != "cuda" else torch.device("cuda", torch.cuda.current_device())
    )
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


def full_model_state(module: nn.Module) -> dict[str, Any]:
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
    return ids_from_names(by_name) if by_name else {}


def load_full_optimizer_state(module: nn.Module, optimizer: Optimizer, state: dict[str, Any]) -> None:
    """Load an ordinary (index-keyed, unsharded) optimizer state; every rank keeps its shard of it.

    Raises:
        ValueError: the saved state has a different number of parameters per group than the optimizer.
    """
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    by_name = names_from_ids(_param_names(module, optimizer), state)  # keyed as DCP wants it
    set_optimizer_state_dict(module, optimizer, by_name, options=_options(full_state_dict=True))


# ---------------------------------------------------------------- sharded folders (checkpoint/sharded.py)
def sharded_model_state(module: nn.Module) -> dict[str, Any]:
    """This rank's shards of the model state (DTensors, plain keys), as a sharded folder holds it: nothing gathered."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(full_state_dict=False))


def sharded_optimizer_state(module: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
    """This rank's shards of the optimizer state, in the ordinary id-keyed layout (DTensor values). Nothing is
    gathered; the layout matches a full checkpoint's, so the folder converts to a file without the model."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return ids_from_names(get_optimizer_state_dict(module, optimizer, options=_options(full_state_dict=False)))


def load_sharded_checkpoint(module: nn.Module, optimizers: list[Optimizer], path: Any) -> None:
    """Load a sharded folder into the sharded ``module`` and ``optimizers`` in place, on every rank (a collective).

    Each rank reads only the parts of the saved shards that overlap its own, so a folder written by N ranks loads on
    M (torch.distributed.checkpoint reshards). ``meta.pt`` is not read here.

    Raises:
        ValueError: the folder holds state for another number of optimizers or parameters.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    # The target: this rank's shards, which torch.distributed.checkpoint fills in place.
    target = {
        "state_dict": sharded_model_state(module),
        "optimizer_states": [sharded_optimizer_state(module, o) for o in optimizers],
    }
    tensors, _ = split_checkpoint(target)
    entries = saved_entries(path)
    check_saved_optimizer_count(path, entries, len(optimizers))
    match_saved_group_options(entries, tensors)
    dcp.load(tensors, storage_reader=folder_reader(path), planner=load_planner())
    set_model_state_dict(module, tensors["state_dict"], options=_options(full_state_dict=False))
    for optimizer, state in zip(optimizers, tensors["optimizer_states"]):
        ids = {**state, "state": {int(pid): slots for pid, slots in state["state"].items()}}
        set_optimizer_state_dict(
            module,
            optimizer,
            names_from_ids(_param_names(module, optimizer), ids),
            options=_options(full_state_dict=False),
        )
