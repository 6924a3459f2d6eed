"""1.x's tuner entry points -> 2.x's ``Tuner`` (rule ``tuner``).

- ``trainer.tuner.lr_find(...)`` / ``trainer.lr_find(...)`` -> ``Tuner(trainer).lr_find(..., update_attr=False)``: 1.x
  left the model's learning rate alone unless asked (``update_attr=False``), 2.x sets it by default; where the result
  went (``lr_finder = ...``, ``model.hparams.lr = lr_finder.suggestion()``) stays as written.
- ``trainer.tuner.scale_batch_size(...)`` / ``trainer.scale_batch_size(...)`` ->
  ``Tuner(trainer).scale_batch_size(...)``.

``trainer.tune()`` and the ``auto_lr_find``/``auto_scale_batch_size`` flags keep their TODOs (``trainer-tune``, ...).

The Tuner comes from the file's own namespace (``pytorch_lightning.tuner`` or ``lightning.pytorch.tuner``). Calls with
more positional arguments than ``model, train_dataloaders, val_dataloaders`` are left as they are (2.x put
``dataloaders`` before ``datamodule``), as are flags whose value this file does not show.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

METHODS = ("lr_find", "scale_batch_size")
#: 1.x keyword names of the tuner methods that 2.x renamed.
RENAMED_KEYWORDS = {"train_dataloader": "train_dataloaders", "val_dataloader": "val_dataloaders"}


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _kwarg(name: str, value: str) -> cst.Arg:
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(keyword=cst.Name(name), value=cst.parse_expression(value), equal=equal)


def _with_args(args: Sequence[cst.Arg], extra: list[cst.Arg]) -> list[cst.Arg] | None:
    """``args`` with renamed 1.x keywords and ``extra`` appended; None where the positional arguments would shift."""
    if sum(1 for a in args if a.keyword is None and not a.star) > 3:
        return None
    given = {a.keyword.value for a in args if a.keyword is not None}
    out = [
        a.with_changes(keyword=cst.Name(RENAMED_KEYWORDS[a.keyword.value]))
        if a.keyword is not None and a.keyword.value in RENAMED_KEYWORDS
        else a
        for a in args
    ]
    extra = [e for e in extra if e.keyword is not None and e.keyword.value not in given]
    if extra and out and out[-1].comma is cst.MaybeSentinel.DEFAULT:
        out[-1] = out[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    for index, arg in enumerate(extra):
        last = index == len(extra) - 1
        out.append(arg if last else arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    return out


def tuner_owner(func: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """For ``trainer.tuner.lr_find`` / ``trainer.lr_find`` (and ``scale_batch_size``): the trainer's expression and
    the method; None for anything else. Only something named like a trainer counts (``trainer``, ``self.trainer``)."""
    if not isinstance(func, cst.Attribute) or func.attr.value not in METHODS:
        return None
    owner = func.value
    if isinstance(owner, cst.Attribute) and owner.attr.value == "tuner":
        owner = owner.value
    last = owner.attr.value if isinstance(owner, cst.Attribute) else owner.value if isinstance(owner, cst.Name) else ""
    if "trainer" not in last.lower():
        return None
    return owner, func.attr.value


def tuner_call(call: cst.Call, trainer: cst.BaseExpression, method: str) -> cst.Call | None:
    """``trainer.tuner.<method>(...)`` -> ``Tuner(trainer).<method>(...)`` (``update_attr=False`` for lr_find, as 1.x
    defaulted); None where the arguments cannot be carried over.

    Args:
        call: the 1.x call.
        trainer: the trainer's expression.
        method: ``lr_find`` or ``scale_batch_size``.
    """
    extra = [_kwarg("update_attr", "False")] if method == "lr_find" else []
    args = _with_args(call.args, extra)
    if args is None:
        return None
    tuner = cst.Call(func=cst.Name("Tuner"), args=[cst.Arg(trainer.deep_clone())])
    return call.with_changes(func=cst.Attribute(value=tuner, attr=cst.Name(method)), args=args)
