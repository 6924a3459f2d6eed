"""Trainer settings that only look like conflicts (rule ``trainer-conflict-resolved``).

A 1.x Trainer call often spelled a default next to the 1.x setting that 2.x moves into the same argument:
``Trainer(gpus=2, accelerator=None)`` (None was "no distributed mode" in 1.x; the device type comes from ``gpus``),
``Trainer(accelerator="ddp", strategy=None)`` or ``strategy="auto"`` (the default). The default goes and the 1.x
setting moves, where it would otherwise be a ``trainer-conflict`` TODO. And ``accelerator="ddp",
plugins="ddp_sharded"`` was 1.x's own spelling of sharded training: the plugin named the strategy, as a plugin object
does.
"""

from __future__ import annotations

from typing import Any, Protocol

import libcst as cst

#: What each argument's default was, in the spellings 1.x code used.
DEFAULTS: dict[str, tuple[Any, ...]] = {"accelerator": (None,), "strategy": (None, "auto")}


class _Args(Protocol):
    def change(self, rule: str, message: str) -> None: ...

    def get(self, name: str) -> cst.BaseExpression | None: ...

    def remove(self, name: str) -> None: ...


def _default(value: cst.BaseExpression, name: str) -> bool:
    if isinstance(value, cst.Name) and value.value == "None":
        return None in DEFAULTS[name]
    if isinstance(value, cst.SimpleString):
        return value.evaluated_value in DEFAULTS[name]
    return False


def drop_default(args: _Args, name: str, beside: str) -> bool:
    """Remove ``name`` from a Trainer call's arguments where it holds its default, so that the 1.x argument
    ``beside`` can set it.

    Args:
        args: the call's arguments (the transformer's ``_TrainerArgs``).
        name: ``"accelerator"`` or ``"strategy"``.
        beside: the 1.x argument that sets it (for the change's message).

    Returns:
        Whether it was removed.
    """
    value = args.get(name)
    if value is None or not _default(value, name):
        return False
    args.remove(name)
    written = cst.Module(body=[]).code_for_node(value)
    args.change("trainer-conflict-resolved", f"{name}={written} dropped: the default, set by {beside}")
    return True


def plugin_refines(strategy: cst.BaseExpression) -> bool:
    """Whether a strategy that ``plugins=`` named wins over ``accelerator="ddp"``: a plugin object always did, and so
    did the string ``"ddp_sharded"`` (``"ddp_sharded_spawn"``), 1.x's spelling of sharded training."""
    if not isinstance(strategy, cst.SimpleString):
        return True
    value = strategy.evaluated_value
    return isinstance(value, str) and "sharded" in value
