"""The 1.x DDP spawn class named in a check, not called (rule ``spawn-isinstance``).

``DDPSpawnStrategy``/``DDPSpawnPlugin`` became ``DDPStrategy(start_method="spawn")``: a call converts
(``calls.renamed_call``) and ``isinstance(s, (DDPStrategy, DDPSpawnStrategy))`` drops the spawn class from the tuple
(``calls.isinstance_spawn``, rule ``ddp-spawn-isinstance``). Here the other checks 1.x scripts make with it:

- ``isinstance(s, DDPSpawnStrategy)`` -> ``legacy_is_ddp_spawn(s)``
  (:func:`lightning_mgpu.upgrade.legacy_spawn.legacy_is_ddp_spawn`, what 1.x's check said of the strategy 2.x built);
- ``isinstance(s, (SingleDeviceStrategy, DDPSpawnStrategy))`` (the tuple without the class it became) ->
  ``(isinstance(s, (SingleDeviceStrategy,)) or legacy_is_ddp_spawn(s))``, where ``s`` is a name or an attribute
  chain (read twice);
- ``DDPSpawnStrategy.__name__`` -> ``"DDPSpawnStrategy"`` (the class's 1.x name, in an error message).

The sharded spawn classes (1.x checked the sharded one alone), a spawn class used as a base or in a list of classes,
keep the ``spawn-class-use`` TODO (``attributes.leave_name``).
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.scopes import dotted as _dotted

HELPER = "legacy_is_ddp_spawn"
#: The 2.x class the DDP spawn classes became: its spawn subset is what legacy_is_ddp_spawn answers.
TARGET = "DDPStrategy"


def _spawn(ctx: UpgradeContext, node: cst.BaseExpression) -> bool:
    """``node`` names a DDP spawn class this file imported (renamed to DDPStrategy with extra arguments)."""
    if not isinstance(node, cst.Name):
        return False
    entry = ctx.renamed.get(node.value)
    return entry is not None and bool(entry[2]) and entry[1] == TARGET


def _rereadable(node: cst.BaseExpression) -> bool:
    """A name or an attribute chain of names: read twice, it gives the same object (no call)."""
    if isinstance(node, cst.Attribute):
        return _rereadable(node.value)
    return isinstance(node, cst.Name)


def _target(ctx: UpgradeContext, node: cst.BaseExpression) -> str:
    """The class ``node`` names after the file's renames (DDPPlugin -> DDPStrategy)."""
    if isinstance(node, cst.Name) and node.value in ctx.renamed:
        return ctx.renamed[node.value][1]
    return _code(node)


def checked_names(ctx: UpgradeContext, call: cst.Call) -> list[cst.Name]:
    """The spawn-class names of ``call`` (an ``isinstance``) that :func:`rewrite_isinstance` replaces; ``[]`` where it
    leaves the call (a tuple that holds DDPStrategy: ``calls.isinstance_spawn`` drops the spawn class there)."""
    if _dotted(call.func) != "isinstance" or len(call.args) != 2:
        return []
    if any(a.keyword is not None or a.star for a in call.args):
        return []
    classes = call.args[1].value
    if _spawn(ctx, classes):
        assert isinstance(classes, cst.Name)
        return [classes]
    if not isinstance(classes, cst.Tuple) or not _rereadable(call.args[0].value):
        return []
    if not all(isinstance(e, cst.Element) for e in classes.elements):
        return []  # a starred element: which classes is not shown
    names = [e.value for e in classes.elements]
    spawns = [n for n in names if _spawn(ctx, n)]
    if not spawns or TARGET in {_target(ctx, n) for n in names if not _spawn(ctx, n)}:
        return []
    return [n for n in spawns if isinstance(n, cst.Name)]


def rewrite_isinstance(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
    """``isinstance(s, DDPSpawnStrategy)`` -> ``legacy_is_ddp_spawn(s)``; with other classes in the tuple,
    ``(isinstance(s, (others,)) or legacy_is_ddp_spawn(s))``. ``updated`` unchanged where :func:`checked_names`
    finds none."""
    if not checked_names(ctx, original):
        return updated
    subject = updated.args[0].value
    classes = updated.args[1].value
    helper = cst.Call(cst.Name(HELPER), [cst.Arg(subject)])
    ctx.add_import("lightning_mgpu.upgrade.legacy_spawn", HELPER, None)
    if not isinstance(classes, cst.Tuple):
        ctx.change(original, "spawn-isinstance", f"{_code(original)} -> {HELPER}(...)")
        return helper
    # The Names of the updated tuple are the original's (leave_name keeps a spawn class it was told of).
    values = [e.value for e in classes.elements if not (isinstance(e.value, cst.Name) and _spawn(ctx, e.value))]
    # (A, B) or (A,): a tuple of one keeps its comma
    kept = [
        cst.Element(
            v,
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            if i < len(values) - 1
            else cst.MaybeSentinel.DEFAULT,
        )
        for i, v in enumerate(values)
    ]
    if len(kept) == 1:
        kept[0] = kept[0].with_changes(comma=cst.Comma())
    narrowed = updated.with_changes(
        args=[updated.args[0], updated.args[1].with_changes(value=cst.Tuple(kept))],
    )
    ctx.change(original, "spawn-isinstance", f"{_code(original)} -> (isinstance(...) or {HELPER}(...))")
    return cst.BooleanOperation(
        left=narrowed,
        operator=cst.Or(),
        right=helper.with_changes(args=[cst.Arg(subject.deep_clone())]),
        lpar=[cst.LeftParen()],
        rpar=[cst.RightParen()],
    )


def name_attribute(ctx: UpgradeContext, node: cst.Attribute) -> bool:
    """``node`` is ``DDPSpawnStrategy.__name__`` (see :func:`class_name`)."""
    return node.attr.value == "__name__" and _spawn(ctx, node.value)


def class_name(ctx: UpgradeContext, original: cst.Attribute, quote: str) -> cst.SimpleString:
    """``DDPSpawnStrategy.__name__`` -> ``"DDPSpawnStrategy"``: the 1.x class's name, which no 2.x class has.

    Args:
        ctx: the file's context.
        original: the attribute (:func:`name_attribute` holds).
        quote: the quote of an f-string the attribute is inside, or ``""``: the string takes the other one (a
            string of the same quote ends the f-string before Python 3.12).
    """
    assert isinstance(original.value, cst.Name)
    name = original.value.value
    ctx.change(original, "spawn-isinstance", f"{name}.__name__ -> {name!r}")
    return cst.SimpleString(f"'{name}'" if '"' in quote else f'"{name}"')
