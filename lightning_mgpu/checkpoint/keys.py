"""The one map from parameters to the keys of saved optimizer state, for every format and engine.

Every checkpoint of the bundle keys optimizer state as torch's ordinary ``state_dict()`` does: one integer per
parameter, in param-group order, the same on every rank, so a file or folder loads under any strategy. The engines
reach those keys from what they hold: OSS/ZeRO from the parameter objects (:func:`param_ids`), FSDP2 from
torch.distributed.checkpoint's parameter names (:func:`ids_from_names`, :func:`names_from_ids`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["ids_from_names", "names_from_ids", "param_groups_with_ids", "param_ids"]


def param_ids(optimizer: torch.optim.Optimizer) -> dict[int, int]:
    """``id(param)`` -> its index in torch's ordinary optimizer state (param-group order): the same on every rank."""
    return {id(p): i for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])}


def param_groups_with_ids(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The optimizer's groups as its ``state_dict()`` writes them (indices for parameters), without consolidating."""
    ids = param_ids(optimizer)
    return [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [ids[id(p)] for p in g["params"]]}
        for g in optimizer.param_groups
    ]


def ids_from_names(by_name: Mapping[str, Any]) -> dict[str, Any]:
    """A name-keyed optimizer state (torch.distributed.checkpoint's) -> torch's ordinary one (ids in group order)."""
    index: dict[str, int] = {}
    groups = []
    for group in by_name["param_groups"]:
        ids = []
        for name in group["params"]:
            index.setdefault(name, len(index))
            ids.append(index[name])
        groups.append({**group, "params": ids})
    return {"state": {index[name]: value for name, value in by_name["state"].items()}, "param_groups": groups}


def names_from_ids(names: list[list[str]], state: Mapping[str, Any]) -> dict[str, Any]:
    """The reverse of :func:`ids_from_names`, for an optimizer whose groups hold the parameters named ``names``.

    Raises:
        ValueError: the saved state has a different number of parameters per group than the optimizer.
    """
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
