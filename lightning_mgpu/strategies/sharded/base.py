"""What FairScale's OSS and torch's ZeRO-1 share: each optimizer is rebuilt as a sharded one, which owns the whole
state of some parameters.

``checkpoint_format="full"`` consolidates the optimizer state on rank 0 into one file. ``"sharded"``: each rank writes
the state of the parameters it owns into the folder (the model, the same on every rank, is written once), and on load
reads only the state of the parameters it owns now, at any number of ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.fabric.utilities.optimizer import _optimizer_to_device
from lightning.pytorch.core.optimizer import _MockOptimizer
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.checkpoint.keys import param_groups_with_ids, param_ids
from lightning_mgpu.checkpoint.sharded import (
    check_saved_optimizer_count,
    read_owned_optimizer_state,
    read_sharded_model,
    saved_entries,
)
from lightning_mgpu.strategies._sharded_base import ShardedBase
from lightning_mgpu.strategies.sharded.optim import ShardedOptimizerFactory, rebuild_optimizer
from lightning_mgpu.utilities.optimizers import is_sharded_optimizer, rebind_schedulers, unwrap_optimizer

__all__ = ["OptimizerShardedBase", "owned_optimizer_state"]


class OptimizerShardedBase(ShardedBase):
    """A sharded strategy whose optimizers are rebuilt as sharded ones (OSS, ``ZeroRedundancyOptimizer``)."""

    def _optimizer_factory(self) -> ShardedOptimizerFactory:
        """Builds this engine's sharded optimizer from (param groups, optimizer class, defaults)."""
        raise NotImplementedError

    def _shard_optimizers(self) -> None:
        """Rebuild every optimizer as a sharded one and re-bind the LR schedulers to the new optimizers."""
        replacements: dict[int, Optimizer] = {}
        optimizers = []
        for optimizer in self.optimizers:
            optimizer = unwrap_optimizer(optimizer)
            if isinstance(optimizer, _MockOptimizer) or is_sharded_optimizer(optimizer):
                optimizers.append(optimizer)
                continue
            sharded = rebuild_optimizer(optimizer, self._optimizer_factory(), self.strategy_name)
            replacements[id(optimizer)] = sharded
            optimizers.append(sharded)
        rebind_schedulers(self.lr_scheduler_configs, replacements)
        self.optimizers = optimizers

    def _sharded_optimizers(self) -> list[Optimizer]:
        return [o for o in map(unwrap_optimizer, self.optimizers) if is_sharded_optimizer(o)]

    @override
    def _holds_shards(self) -> bool:
        return bool(self._sharded_optimizers())

    @override
    def _optimizer_state(self, optimizer: Optimizer, sharded: bool) -> dict[str, Any]:
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
            optimizer.consolidate_state_dict(recipient_rank=0)  # type: ignore[attr-defined]
            store = "_all_states"
        if not self.is_global_zero:
            return {}
        state = optimizer.state_dict()
        # The consolidated copy of every rank's shard would otherwise stay on rank 0 until the next save.
        setattr(optimizer, store, [])
        return state

    @override
    def _load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        if not is_sharded_optimizer(optimizer):
            super()._load_optimizer_state(optimizer, state)
            return
        # OSS/ZeRO blank the entries of other ranks in the dict they are given: give them a copy, so the loaded
        # checkpoint stays whole for anything else that reads it.
        optimizer.load_state_dict({**state, "state": dict(state["state"])})
        # Their wrapper's own `state` is unused (the shard's optimizer holds the state) but now references the loaded
        # shard; on GPU it is a second copy. Drop it to keep the 1/N memory saving.
        optimizer.state.clear()
        _optimizer_to_device(optimizer.optim, self.root_device)  # type: ignore[attr-defined]

    @override
    def _load_sharded_folder(self, path: Path) -> None:
        module = self.lightning_module
        assert module is not None
        optimizers = [unwrap_optimizer(o) for o in self.optimizers]
        entries = saved_entries(path)
        check_saved_optimizer_count(path, entries, len(optimizers))
        # The model is the same on every rank: each reads it whole (it holds it whole anyway).
        module.load_state_dict(read_sharded_model(path, module.state_dict()))
        for index, optimizer in enumerate(optimizers):
            if not is_sharded_optimizer(optimizer):
                continue
            ids = param_ids(optimizer)
            owned = [ids[id(p)] for group in optimizer.optim.param_groups for p in group["params"]]
            state = read_owned_optimizer_state(
                path, entries, index, owned, param_groups_with_ids(optimizer), len(optimizers)
            )
            self._load_optimizer_state(optimizer, state)


def owned_optimizer_state(optimizer: Optimizer) -> dict[str, Any]:
    """This rank's part of a sharded (OSS/ZeRO) optimizer's state, in torch's ordinary layout: the state of the
    parameters this rank owns, under their global indices. The parts of all ranks together are the full state."""
    ids = param_ids(optimizer)
    local = optimizer.optim  # type: ignore[attr-defined]
    return {
        "state": {ids[id(p)]: dict(slots) for p, slots in local.state.items()},
        "param_groups": param_groups_with_ids(optimizer),
    }
