"""``fully_shard`` per block, then the root (torchtitan's recipe), for :class:`~.FSDP2Strategy`.

Each block's parameters are gathered just before it runs, and its gradients reduce-scattered as soon as its backward
finishes. Parameters become DTensors sharded over one mesh dimension; the optimizer built after it holds only this
rank's shard of its state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from lightning_mgpu.utilities._compat import check_fsdp2_device
from lightning_mgpu.utilities.modules import ModuleSpec, select_modules

__all__ = ["DEFAULT_MIN_PARAMS", "apply_fully_shard", "default_blocks", "is_fully_sharded", "no_sync"]

#: The default ``min_params``: a module gets a ``fully_shard`` group of its own once it holds this many parameters that
#: no smaller group took. Each group costs a fixed host time per step (its pre-forward, post-forward and post-backward
#: hooks, one all-gather and one reduce-scatter launched), whatever its size: a BatchNorm's 128 parameters cost as much
#: as a transformer block's 7M (pytorch#173680: leaving small modules out of ``fully_shard`` cut a step by 18 %). At
#: 1M (4 MB in fp32) a group's collectives are large enough to run near bandwidth: ResNet-50 gets 10 groups (its nine
#: stage-3 and -4 bottlenecks and its head; the stem and the first two stages stay in the root's) where one per module
#: holding parameters made 107, and GPT-2 small one per block, as torchtitan groups it. ``benchmarks/profile_fsdp2.py``
#: measures a step's host time at other thresholds.
DEFAULT_MIN_PARAMS = 1_000_000

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)

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
    min_params: int = DEFAULT_MIN_PARAMS,
) -> list[str]:
    """Shard ``module`` in place with FSDP2: each chosen block, then the root. Returns the blocks' names.

    Args:
        module: the LightningModule, on its device, with the same weights on every rank.
        world_size: ranks in the (single) mesh dimension.
        device_type: ``"cpu"`` (gloo) or ``"cuda"``.
        reshard_after_forward: ``False`` keeps gathered parameters from forward to backward (ZeRO-2); ``True`` frees
            them after forward and gathers again in backward (ZeRO-3: less memory, one more all-gather).
        blocks: which submodules get their own ``fully_shard`` (classes, name patterns or predicates). ``None``:
            chosen by size (:func:`default_blocks` with ``min_params``).
        mp_policy: ``torch.distributed.fsdp.MixedPrecisionPolicy`` (the dtype parameters are gathered and computed
            in, and the one gradients are reduced in); ``None``: fp32 throughout.
        offload_policy: ``torch.distributed.fsdp.CPUOffloadPolicy`` (shards, gradients and optimizer state on the
            CPU; the step runs there); ``None``: kept on the device.
        min_params: with ``blocks=None``, the parameters a module must hold (beyond its groups') to get a group.

    Raises:
        ValueError: an entry of ``blocks`` matches no submodule.
        UnsupportedTorchError: the CPU, with a torch whose FSDP2 cannot run there (``_compat.FSDP2_ON_CPU_SINCE``).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    if offload_policy is not None and device_type == "cpu":
        raise ValueError(
            "FSDP2Strategy(offload_policy=CPUOffloadPolicy()) needs a GPU: it keeps the shards in CPU memory between"
            " their uses on the device, and on the CPU they are there already. Remove offload_policy (--fsdp2-offload)."
        )
    check_fsdp2_device(device_type)
    mesh = init_device_mesh(device_type, (world_size,))
    if blocks is None:
        chosen = default_blocks(module, min_params)
    else:
        chosen = select_modules(module, blocks, owner="FSDP2Strategy(fsdp_modules=...)")
    policies: dict[str, Any] = {}
    if mp_policy is not None:
        policies["mp_policy"] = mp_policy
    if offload_policy is not None:
        policies["offload_policy"] = offload_policy
    # Innermost first: a block nested in another chosen block must be sharded before its parent.
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


def default_blocks(module: nn.Module, min_params: int = DEFAULT_MIN_PARAMS) -> list[tuple[str, nn.Module]]:
    """The submodules that get a ``fully_shard`` group of their own when the user names none: whole blocks.

    Top down from the root's children:

    - a module holding fewer than ``min_params`` parameters joins the enclosing group (a BatchNorm, a stem, an early
      ResNet stage), and so does one holding none;
    - a container (``Sequential``, ``ModuleList``, ``ModuleDict``) or a module that holds repeated blocks (a container
      with two or more children of one class each reaching ``min_params``, as an encoder holds its layers) is split:
      its children are looked at in turn, and what it holds itself joins the enclosing group;
    - any other module is one group, whole: a transformer layer or a ResNet bottleneck, as torchtitan groups by block.

    A module holding a parameter that is also reachable outside it never gets a group (``fully_shard`` refuses one
    parameter in two groups): a GPT's token embedding and output head share their weight and stay with the root, as
    torchtitan leaves tied embeddings to the root. ``min_params=0`` makes a group of every block regardless of size.
    """
    owners: dict[int, set[str]] = {}
    for name, sub in module.named_modules(remove_duplicate=False):
        for param in sub.parameters(recurse=False):
            owners.setdefault(id(param), set()).add(name)

    def size(sub: nn.Module) -> int:
        return sum(p.numel() for p in sub.parameters())

    def closed(name: str, sub: nn.Module) -> bool:
        return all(o == name or o.startswith(name + ".") for p in sub.parameters() for o in owners[id(p)])

    def holds_repeated(sub: nn.Module) -> bool:
        for inner in sub.modules():
            if isinstance(inner, _CONTAINERS):
                counts = Counter(type(c) for c in inner.children() if size(c) >= max(min_params, 1))
                if any(n >= 2 for n in counts.values()):
                    return True
        return False

    chosen: list[tuple[str, nn.Module]] = []

    def visit(prefix: str, parent: nn.Module) -> None:
        for child_name, child in parent.named_children():
            name = f"{prefix}.{child_name}" if prefix else child_name
            if size(child) < max(min_params, 1):
                continue  # joins the enclosing group
            if isinstance(child, _CONTAINERS) or not closed(name, child) or holds_repeated(child):
                visit(name, child)
            else:
                chosen.append((name, child))

    visit("", module)
    return chosen


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
