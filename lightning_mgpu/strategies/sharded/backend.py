"""One interface for the ``sharded`` strategy's backends: wrap the model and optimizers, sync, save and load.

:class:`~lightning_mgpu.strategies.sharded.strategy.ShardedStrategy` is a Lightning ``DDPStrategy`` that delegates
every backend-specific step to one :class:`ShardingBackend` object and never branches on the backend's name:

- ``FairScaleBackend`` (``fairscale.py``): OSS + ShardedDataParallel, ZeRO-2;
- ``TorchZeroBackend`` (``zero.py``): ``ZeroRedundancyOptimizer`` + DDP, ZeRO-1;
- ``FSDP2Backend`` (``fsdp2.py``): ``fully_shard``, parameters, gradients and optimizer state as DTensors.

A method that returns ``None`` (or is left at the default here) lets the strategy do what Lightning's ``DDPStrategy``
does. The first two share :class:`OptimizerShardingBackend`: optimizers rebuilt as sharded ones, whose state is
consolidated on rank 0 to save.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from lightning.fabric.utilities.optimizer import _optimizer_to_device
from lightning.pytorch.core.optimizer import _MockOptimizer
from torch import Tensor
from torch.optim import Optimizer

from lightning_mgpu.strategies._optim import rebind_schedulers, unwrap_optimizer
from lightning_mgpu.strategies.sharded.optim import is_sharded_optimizer, rebuild_optimizer
from lightning_mgpu.utilities.modules import ModuleSpec

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_mgpu.strategies.sharded.strategy import ShardedStrategy

CheckpointFormat = Literal["sharded", "full"]

__all__ = ["CheckpointFormat", "OptimizerShardingBackend", "ShardedOptions", "ShardingBackend"]


@dataclass
class ShardedOptions:
    """The backend options of ``ShardedStrategy`` (see its docstring); each backend refuses those it does not take."""

    reduce_buffer_size: int | None = None
    find_unused_parameters: bool = False
    broadcast_fp16: bool | None = None
    reshard_after_forward: bool | None = None
    fsdp_modules: Sequence[ModuleSpec] | None = None
    mp_policy: Any = None
    offload_policy: Any = None
    #: passed on to the wrapper (ShardedDataParallel or DistributedDataParallel)
    wrapper_kwargs: dict[str, Any] = field(default_factory=dict)


class ShardingBackend:
    """What one backend does for :class:`ShardedStrategy`; the defaults are plain DDP's behaviour.

    Args:
        strategy: the strategy this backend works for (its model, optimizers, ranks and precision).
        options: the checked options.
    """

    name: ClassVar[str]
    #: each rank holds only its shard of the reduced gradients (ZeRO-2/3): clipping and scaling must agree across ranks
    shards_gradients: ClassVar[bool] = False
    #: every rank can write its own part of the state into a folder (``checkpoint_format="sharded"``)
    writes_sharded_checkpoints: ClassVar[bool] = False
    #: the format when the user names none
    default_checkpoint_format: ClassVar[CheckpointFormat] = "full"
    #: ``configure_model`` builds the layers on the meta device and ``setup`` materialises only each rank's shards
    builds_sharded: ClassVar[bool] = False

    def __init__(self, strategy: ShardedStrategy, options: ShardedOptions) -> None:
        self.strategy = strategy
        self.options = options

    @classmethod
    def check_options(cls, options: ShardedOptions) -> None:
        """Refuse options this backend would ignore or fail on late, naming the fix.

        Raises:
            ValueError: such an option.
        """

    def ddp_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for Lightning's ``DDPStrategy`` (and through it ``DistributedDataParallel``)."""
        return {}

    # ------------------------------------------------------------------ fit
    def setup_fit(self, trainer: pl.Trainer) -> None:
        """Wrap the model and build the (sharded) optimizers, in the order the backend needs."""
        raise NotImplementedError

    def model_is_sharded(self) -> bool:
        """Whether the model's parameters are sharded now (not only its optimizer state)."""
        return False

    def no_sync(self) -> AbstractContextManager | None:
        """A context that skips gradient reduction, or ``None`` for DDP's ``no_sync``."""
        return None

    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor | None:
        """Run the backward pass itself and return the loss, or ``None`` to let Lightning run it."""
        return None

    def post_backward(self) -> None:
        """Checks after each backward pass."""

    def before_training_step(self) -> None:
        """Work before each training step."""

    def on_optimizers_set(self) -> None:
        """The strategy's optimizers were replaced (its LightningOptimizer wrappers are new)."""

    def teardown(self) -> None:
        """Undo what ``setup_fit`` installed that outlives the fit."""

    # ------------------------------------------------------------------ checkpoints
    def holds_shards(self) -> bool:
        """Whether this rank now holds state that only it has (a sharded folder is written and read in place)."""
        return False

    def sharded_context(self, fitting: bool) -> AbstractContextManager:
        """Where ``configure_model`` builds the layers."""
        return nullcontext()

    def model_state(self, sharded: bool) -> dict[str, Any] | None:
        """The model state to save (``sharded``: this rank's shards), or ``None`` for Lightning's."""
        return None

    def optimizer_state(self, optimizer: Optimizer, sharded: bool) -> dict[str, Any]:
        """The optimizer state to save: the whole one on rank 0 (``{}`` elsewhere), or this rank's shards."""
        return optimizer.state_dict()

    def load_model_state(self, state: dict[str, Any], strict: bool) -> bool:
        """Load a whole model state; ``False``: not handled, Lightning's load applies."""
        return False

    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        """Load a whole (unsharded) optimizer state; each rank keeps what it owns."""
        optimizer.load_state_dict(state)
        _optimizer_to_device(optimizer, self.strategy.root_device)

    def load_sharded_checkpoint(self, path: Any) -> None:
        """Load a sharded folder straight into the sharded model and optimizers."""
        raise NotImplementedError(f"backend {self.name!r} does not read sharded checkpoint folders")

    def handoff_state(self) -> dict[str, Any]:
        """Whole plain tensors for a spawn launcher to hand back to the launching process."""
        module = self.strategy.lightning_module
        assert module is not None
        return module.state_dict()


class OptimizerShardingBackend(ShardingBackend):
    """ZeRO-style backends: each optimizer is rebuilt as a sharded one, which owns the whole state of some parameters.

    ``checkpoint_format="full"`` consolidates the state on rank 0. ``"sharded"``: each rank writes the state of the
    parameters it owns into the folder (the model, the same on every rank, is written once), and on load reads only
    the state of the parameters it owns now, at any number of ranks.
    """

    writes_sharded_checkpoints = True

    @classmethod
    def check_options(cls, options: ShardedOptions) -> None:
        if options.reduce_buffer_size is not None and options.reduce_buffer_size < 0:
            raise ValueError(
                f"ShardedStrategy(reduce_buffer_size={options.reduce_buffer_size}) must be >= 0 (0 disables bucketing)."
            )
        if options.reshard_after_forward is not None or options.fsdp_modules is not None:
            raise ValueError(
                "ShardedStrategy(reshard_after_forward=..., fsdp_modules=...) are options of backend='fsdp2'; pass"
                " backend='fsdp2' or remove them."
            )
        if options.mp_policy is not None or options.offload_policy is not None:
            raise ValueError(
                "ShardedStrategy(mp_policy=..., offload_policy=...) are FSDP2's policies; pass backend='fsdp2' or remove"
                " them (the other backends take Trainer(precision=...))."
            )

    def optimizer_factory(self) -> Any:
        """A factory for :func:`~lightning_mgpu.strategies.sharded.optim.rebuild_optimizer`."""
        raise NotImplementedError

    def shard_optimizers(self) -> None:
        """Rebuild every optimizer as a sharded one and re-bind the LR schedulers to the new optimizers."""
        strategy = self.strategy
        replacements: dict[int, Optimizer] = {}
        optimizers = []
        for optimizer in strategy.optimizers:
            optimizer = unwrap_optimizer(optimizer)
            if isinstance(optimizer, _MockOptimizer) or is_sharded_optimizer(optimizer):
                optimizers.append(optimizer)
                continue
            sharded = rebuild_optimizer(optimizer, self.optimizer_factory(), self.name)
            replacements[id(optimizer)] = sharded
            optimizers.append(sharded)
        rebind_schedulers(strategy.lr_scheduler_configs, replacements)
        strategy.optimizers = optimizers

    def _sharded_optimizers(self) -> list[Optimizer]:
        return [o for o in map(unwrap_optimizer, self.strategy.optimizers) if is_sharded_optimizer(o)]

    def holds_shards(self) -> bool:
        return bool(self._sharded_optimizers())

    def optimizer_state(self, optimizer: Optimizer, sharded: bool) -> dict[str, Any]:
        if not is_sharded_optimizer(optimizer):
            return optimizer.state_dict()
        if sharded:
            return owned_optimizer_state(optimizer)
        # Consolidation is a collective: every rank calls this (Lightning's dump_checkpoint does); rank 0 writes.
        from torch.distributed.optim import ZeroRedundancyOptimizer

        if isinstance(optimizer, ZeroRedundancyOptimizer):
            optimizer.consolidate_state_dict(to=0)
            store = "_all_state_dicts"
        else:
            optimizer.consolidate_state_dict(recipient_rank=0)
            store = "_all_states"
        if not self.strategy.is_global_zero:
            return {}
        state = optimizer.state_dict()
        # The consolidated copy of every rank's shard would otherwise stay on rank 0 until the next save.
        setattr(optimizer, store, [])
        return state

    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        if not is_sharded_optimizer(optimizer):
            super().load_optimizer_state(optimizer, state)
            return
        # OSS/ZeRO blank the entries of other ranks in the dict they are given: give them a copy, so the loaded
        # checkpoint stays whole for anything else that reads it.
        optimizer.load_state_dict({**state, "state": dict(state["state"])})
        # Their wrapper's own `state` is unused (the shard's optimizer holds the state) but now references the loaded
        # shard; on GPU it is a second copy. Drop it to keep the 1/N memory saving.
        optimizer.state.clear()
        _optimizer_to_device(optimizer.optim, self.strategy.root_device)  # type: ignore[attr-defined]

    def load_sharded_checkpoint(self, path: Any) -> None:
        from lightning_mgpu.utilities.sharded_checkpoint import (
            check_saved_optimizer_count,
            read_owned_optimizer_state,
            read_sharded_model,
            saved_entries,
        )

        module = self.strategy.lightning_module
        assert module is not None
        optimizers = [unwrap_optimizer(o) for o in self.strategy.optimizers]
        entries = saved_entries(path)
        check_saved_optimizer_count(path, entries, len(optimizers))
        # The model is the same on every rank: each reads it whole (it holds it whole anyway).
        module.load_state_dict(read_sharded_model(path, module.state_dict()))
        for index, optimizer in enumerate(optimizers):
            if not is_sharded_optimizer(optimizer):
                continue
            ids = param_ids(optimizer)
            owned = [ids[id(p)] for group in optimizer.optim.param_groups for p in group["params"]]  # type: ignore[attr-defined]
            state = read_owned_optimizer_state(
                path, entries, index, owned, param_groups_with_ids(optimizer), len(optimizers)
            )
            self.load_optimizer_state(optimizer, state)


def param_ids(optimizer: Optimizer) -> dict[int, int]:
    """``id(param)`` -> its index in torch's ordinary optimizer state (param-group order): the same on every rank."""
    return {id(p): i for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])}


def param_groups_with_ids(optimizer: Optimizer) -> list[dict[str, Any]]:
    """The optimizer's groups as its ``state_dict()`` writes them (indices for parameters), without consolidating."""
    ids = param_ids(optimizer)
    return [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [ids[id(p)] for p in g["params"]]}
        for g in optimizer.param_groups
    ]


def owned_optimizer_state(optimizer: Optimizer) -> dict[str, Any]:
    """This rank's part of a sharded (OSS/ZeRO) optimizer's state, in torch's ordinary layout: the state of the
    parameters this rank owns, under their global indices. The parts of all ranks together are the full state."""
    ids = param_ids(optimizer)
    local = optimizer.optim  # type: ignore[attr-defined]
    return {
        "state": {ids[id(p)]: dict(slots) for p, slots in local.state.items()},
        "param_groups": param_groups_with_ids(optimizer),
    }
