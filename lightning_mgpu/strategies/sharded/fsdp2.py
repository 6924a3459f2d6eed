"""The FSDP2 side of the ``sharded`` strategy: torch's ``fully_shard`` (ZeRO-2, or ZeRO-3), with plain checkpoints.

``fully_shard`` is applied per block, then to the root (torchtitan's recipe): each block's parameters are gathered
just before it runs, and its gradients reduce-scattered as soon as its backward finishes. Parameters become DTensors
sharded over one mesh dimension; the optimizer built after it holds only this rank's shard of its state.

Checkpoints keep the bundle's layout (full model keys, the ordinary index-keyed optimizer state) in either format:
``"sharded"`` (the default): every rank writes its own shards into a folder (``utilities/sharded_checkpoint.py``),
nothing is gathered; ``"full"``: gathered to rank 0 (``get_*_state_dict`` with ``full_state_dict``) into one file.
Both load under ``ddp``, ``dp``, the other backends and any number of ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.strategies.sharded.backend import ShardedOptions, ShardingBackend
from lightning_mgpu.utilities.modules import ModuleSpec, select_modules

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = [
    "FSDP2Backend",
    "apply_fully_shard",
    "full_optimizer_state",
    "is_fully_sharded",
    "load_full_optimizer_state",
    "load_sharded_checkpoint",
    "no_sync",
    "sharded_model_state",
    "sharded_optimizer_state",
]

# The LightningModule methods Lightning calls instead of forward: FSDP2 must gather the root's parameters for them.
_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


def apply_fully_shard(
    module: nn.Module,
    world_size: int,
    device_type: str,
    reshard_after_forward: bool,
    blocks: list[ModuleSpec] | None,
    mp_policy: Any = None,
    offload_policy: Any = None,
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
        mp_policy: ``torch.distributed.fsdp.MixedPrecisionPolicy`` (the dtype parameters are gathered and computed
            in, and the one gradients are reduced in); ``None``: fp32 throughout.
        offload_policy: ``torch.distributed.fsdp.CPUOffloadPolicy`` (shards, gradients and optimizer state on the
            CPU; the step runs there); ``None``: kept on the device.

    Raises:
        ValueError: an entry of ``blocks`` matches no submodule.
        UnsupportedTorchError: the CPU, with a torch whose FSDP2 cannot run there (``_compat.FSDP2_ON_CPU_SINCE``).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    from lightning_mgpu.utilities._compat import check_fsdp2_device

    if offload_policy is not None and device_type == "cpu":
        raise ValueError(
            "ShardedStrategy(offload_policy=CPUOffloadPolicy()) needs a GPU: it keeps the shards in CPU memory between"
            " their uses on the device, and on the CPU they are there already. Remove offload_policy (--fsdp2-offload)."
        )
    check_fsdp2_device(device_type)
    mesh = init_device_mesh(device_type, (world_size,))
    if blocks is None:
        chosen = [(n, m) for n, m in module.named_modules() if n and any(True for _ in m.parameters(recurse=False))]
    else:
        chosen = select_modules(module, blocks, owner="ShardedStrategy(fsdp_modules=...)")
    # Innermost first: a block nested in another chosen block must be sharded before its parent.
    policies: dict[str, Any] = {}
    if mp_policy is not None:
        policies["mp_policy"] = mp_policy
    if offload_policy is not None:
        policies["offload_policy"] = offload_policy
    for _, block in sorted(chosen, key=lambda item: item[0].count("."), reverse=True):
        fully_shard(
            block,
            mesh=mesh,
            reshard_after_forward=reshard_after_forward,
            **{**policies, **_norm_policy(block, mp_policy)},
        )
    fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward, **policies)
    for name in _STEP_METHODS:
        if callable(getattr(module, name, None)):
            register_fsdp_forward_method(module, name)
    return [name for name, _ in chosen]


def _norm_policy(block: nn.Module, mp_policy: Any) -> dict[str, Any]:
    """Normalization layers keep fp32 parameters under a low-precision ``mp_policy``: their running statistics are fp32
    buffers, and batch norm refuses bf16/fp16 weights beside fp32 statistics. Their input is cast up and their output
    back to the policy's dtype, so the layers around them still compute in it."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.nn.modules.batchnorm import _NormBase

    if mp_policy is None or mp_policy.param_dtype in (None, torch.float32):
        return {}
    if not isinstance(block, (_NormBase, nn.LayerNorm, nn.GroupNorm)):
        return {}
    return {
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=torch.float32,
            reduce_dtype=mp_policy.reduce_dtype,
            output_dtype=mp_policy.param_dtype,
            cast_forward_inputs=True,
        )
    }


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


def _ids_from_names(by_name: dict[str, Any]) -> dict[str, Any]:
    """torch.distributed.checkpoint's name-keyed optimizer state -> torch's ordinary one (ids in param-group order)."""
    index: dict[str, int] = {}
    groups = []
    for group in by_name["param_groups"]:
        ids = []
        for name in group["params"]:
            index.setdefault(name, len(index))
            ids.append(index[name])
        groups.append({**group, "params": ids})
    return {"state": {index[name]: value for name, value in by_name["state"].items()}, "param_groups": groups}


def _names_from_ids(module: nn.Module, optimizer: Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """The reverse of :func:`_ids_from_names`, for this optimizer's parameters.

    Raises:
        ValueError: the saved state has a different number of parameters per group than the optimizer.
    """
    names = _param_names(module, optimizer)
    saved_groups = state["param_groups"]
    if [len(g) for g in names] != [len(g["params"]) for g in saved_groups]:
        raise ValueError(
            f"the checkpoint's optimizer has {[len(g['params']) for g in saved_groups]} parameters per group, this one"
            f" {[len(g) for g in names]}: it was saved for another model or optimizer configuration."
        )
    name_of = {pid: name for group, saved in zip(names, saved_groups) for name, pid in zip(group, saved["params"])}
    return {
        "state": {name_of[pid]: value for pid, value in state["state"].items() if pid in name_of},
        "param_groups": [{**saved, "params": group} for group, saved in zip(names, saved_groups)],
    }


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
    return _ids_from_names(by_name) if by_name else {}


def load_full_optimizer_state(module: nn.Module, optimizer: Optimizer, state: dict[str, Any]) -> None:
    """Load an ordinary (index-keyed, unsharded) optimizer state; every rank keeps its shard of it.

    Raises:
        ValueError: the saved state has a different number of parameters per group than the optimizer.
    """
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    by_name = _names_from_ids(module, optimizer, state)
    set_optimizer_state_dict(module, optimizer, by_name, options=_options(full_state_dict=True))


# ---------------------------------------------------------------- sharded checkpoints (utilities/sharded_checkpoint.py)
def sharded_model_state(module: nn.Module) -> dict[str, Any]:
    """This rank's shards of the model state (DTensors, plain keys): what a sharded folder holds. Nothing is gathered."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(full_state_dict=False))


def sharded_optimizer_state(module: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
    """This rank's shards of the optimizer state, in the ordinary id-keyed layout (DTensor values). Nothing is
    gathered; the layout matches a full checkpoint's, so the folder converts to a file without the model."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return _ids_from_names(get_optimizer_state_dict(module, optimizer, options=_options(full_state_dict=False)))


def load_sharded_checkpoint(module: nn.Module, optimizers: list[Optimizer], path: Any) -> None:
    """Load a sharded folder into the sharded ``module`` and ``optimizers`` in place, on every rank (a collective).

    Each rank reads only the parts of the saved shards that overlap its own, so a folder written by N ranks loads on
    M (torch.distributed.checkpoint reshards). ``meta.pt`` is not read here.

    Raises:
        ValueError: the folder holds state for another number of optimizers or parameters.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    from lightning_mgpu.utilities.sharded_checkpoint import check_saved_optimizer_count, saved_entries, split_checkpoint

    # The target: this rank's shards, which torch.distributed.checkpoint fills in place.
    target = {
        "state_dict": sharded_model_state(module),
        "optimizer_states": [sharded_optimizer_state(module, o) for o in optimizers],
    }
    tensors, _ = split_checkpoint(target)
    check_saved_optimizer_count(path, saved_entries(path), len(optimizers))
    dcp.load(tensors, storage_reader=dcp.FileSystemReader(str(path)))
    set_model_state_dict(module, tensors["state_dict"], options=_options(full_state_dict=False))
    for optimizer, state in zip(optimizers, tensors["optimizer_states"]):
        ids = {**state, "state": {int(pid): slots for pid, slots in state["state"].items()}}
        set_optimizer_state_dict(
            module, optimizer, _names_from_ids(module, optimizer, ids), options=_options(full_state_dict=False)
        )


class FSDP2Backend(ShardingBackend):
    """``backend="fsdp2"``: ``fully_shard`` per block, then the root; the optimizers are built on the DTensor shards."""

    name = "fsdp2"
    shards_gradients = True
    writes_sharded_checkpoints = True
    default_checkpoint_format = "sharded"
    builds_sharded = True

    @classmethod
    @override
    def check_options(cls, options: ShardedOptions) -> None:
        if options.find_unused_parameters:
            raise ValueError(
                "ShardedStrategy(backend='fsdp2', find_unused_parameters=True) is not supported: FSDP2 reduce-scatters"
                " per block, and ranks that skip different parameters would fall out of step. Use backend='torch' (DDP's"
                " find_unused_parameters) or backend='fairscale'."
            )
        given = [
            n
            for n, v in (("reduce_buffer_size", options.reduce_buffer_size), ("broadcast_fp16", options.broadcast_fp16))
            if v is not None
        ]
        given += sorted(options.wrapper_kwargs)
        if given:
            raise ValueError(
                f"ShardedStrategy(backend='fsdp2') does not take {given}: those are FairScale's or DDP's options. FSDP2's"
                " are reshard_after_forward and fsdp_modules."
            )

    def _module(self) -> nn.Module:
        module = self.strategy.lightning_module
        assert module is not None
        return module

    @override
    def setup_fit(self, trainer: pl.Trainer) -> None:
        # The optimizers must be built on the sharded (DTensor) parameters: fully_shard first.
        self._fully_shard()
        self.strategy.setup_optimizers(trainer)

    def _fully_shard(self) -> None:
        from lightning.fabric.utilities.init import (
            _has_meta_device_parameters_or_buffers,
            _materialize_distributed_module,
        )
        from lightning.pytorch.overrides.distributed import _sync_module_states
        from lightning.pytorch.utilities.rank_zero import rank_zero_info

        strategy, options = self.strategy, self.options
        model = strategy.model
        assert model is not None
        on_meta = _has_meta_device_parameters_or_buffers(model)
        if not on_meta:
            # fully_shard keeps each rank's own slice of the weights it is given: start from rank 0's, as DDP does.
            _sync_module_states(model)
        reshard = bool(options.reshard_after_forward)
        blocks = apply_fully_shard(
            model,
            strategy.world_size,
            strategy.root_device.type,
            reshard,
            None if options.fsdp_modules is None else list(options.fsdp_modules),
            mp_policy=options.mp_policy,
            offload_policy=options.offload_policy,
        )
        if on_meta:
            # Built in configure_model on the meta device: each rank allocates its shards only, then reset_parameters()
            # initialises them (DTensor-aware, so the ranks draw one consistent tensor). The whole model never exists.
            _materialize_distributed_module(model, strategy.root_device)
        rank_zero_info(
            f"strategy='sharded' (fsdp2): {len(blocks)} block(s) and the root sharded over {strategy.world_size} rank(s),"
            f" reshard_after_forward={reshard} ({'ZeRO-3' if reshard else 'ZeRO-2'})"
            + (", built on the meta device and materialised shard by shard." if on_meta else ".")
        )

    @override
    def model_is_sharded(self) -> bool:
        model = self.strategy.model
        return model is not None and is_fully_sharded(model)

    @override
    def no_sync(self) -> AbstractContextManager | None:
        return no_sync(self.strategy.model) if self.model_is_sharded() else None  # type: ignore[arg-type]

    @override
    def holds_shards(self) -> bool:
        return self.model_is_sharded()

    @override
    def sharded_context(self, fitting: bool) -> AbstractContextManager:
        # When fitting, configure_model builds the layers on the meta device (no memory) and setup materialises only
        # each rank's shards after fully_shard. Validate/test/predict run on the bare module, built as usual.
        return torch.device("meta") if fitting else nullcontext()

    @override
    def model_state(self, sharded: bool) -> dict[str, Any] | None:
        if not self.model_is_sharded():
            return None
        return sharded_model_state(self._module()) if sharded else full_model_state(self._module())

    @override
    def optimizer_state(self, optimizer: Optimizer, sharded: bool) -> dict[str, Any]:
        if not self.model_is_sharded():
            return optimizer.state_dict()
        if sharded:
            return sharded_optimizer_state(self._module(), optimizer)
        state = full_optimizer_state(self._module(), optimizer)  # a collective
        return state if self.strategy.is_global_zero else {}

    @override
    def load_model_state(self, state: dict[str, Any], strict: bool) -> bool:
        if not self.model_is_sharded():
            return False
        # Loaded after fully_shard (e.g. by a callback): scatter the whole state.
        load_full_model_state(self._module(), state, strict=strict)
        return True

    @override
    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        if not self.model_is_sharded():
            super().load_optimizer_state(optimizer, state)
            return
        load_full_optimizer_state(self._module(), optimizer, state)

    @override
    def load_sharded_checkpoint(self, path: Any) -> None:
        from lightning_mgpu.strategies._optim import unwrap_optimizer

        load_sharded_checkpoint(self._module(), [unwrap_optimizer(o) for o in self.strategy.optimizers], path)

    @override
    def handoff_state(self) -> dict[str, Any]:
        return full_model_state(self._module()) if self.model_is_sharded() else super().handoff_state()
