"""Trainer settings this tool cannot read, translated at run time (rule ``trainer-args-translated``).

``Trainer(accelerator=args.accelerator, gpus=args.gpus, progress_bar_refresh_rate=args.rate)``: the values come from a
command line or a config file, and 1.x read them by what they held (``accelerator="ddp"`` was a strategy, ``"gpu"`` a
device type; a refresh rate of 0 hid the bar). Rewritten one by one they would each leave a TODO
(``trainer-accelerator-unknown``, ``trainer-conflict`` between ``gpus`` and that accelerator,
``trainer-progress-bar``, ``trainer-weights-summary``). Instead the settings that decide the devices, the strategy, the
progress bar and the model summary move together into
``**legacy_trainer_kwargs(accelerator=..., gpus=..., callbacks=[...])``
(:func:`lightning_mgpu.upgrade.trainer_args.legacy_trainer_kwargs`), which translates them when the Trainer is built as
1.x's Trainer read them, and refuses with a ValueError a value that has no 2.x meaning. The call's other arguments
are rewritten as usual.

Only where every TODO the call would get is one of those, and at least one comes from a value this tool cannot read:
two literal settings that disagree stay a ``trainer-conflict`` TODO, and a call with a splat of its own, or with a
``plugins=`` the strategy rewrite does not turn into ``strategy=``, is left to the other rules (one it does turn into
``strategy=DDPStrategy(...)`` moves that strategy with the rest: see
:func:`~lightning_mgpu.upgrade.trainer_call.trainer_call`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import libcst as cst

from lightning_mgpu.upgrade import rules

#: The TODOs a run-time translation settles.
SETTLED = frozenset(
    {
        "trainer-accelerator-unknown",
        "trainer-accelerator-unread",
        "trainer-conflict",
        "trainer-progress-bar",
        "trainer-weights-summary",
    }
)
#: The TODOs that say a value could not be read (a conflict alone is two literals that disagree: a person's call).
UNREADABLE = frozenset(
    {"trainer-accelerator-unknown", "trainer-accelerator-unread", "trainer-progress-bar", "trainer-weights-summary"}
)
#: The settings that move into the translation together (each can set what another sets: accelerator and devices from
#: gpus, the strategy from accelerator, callbacks from the progress bar's rate).
MOVED = (
    "accelerator",
    "distributed_backend",
    "strategy",
    "gpus",
    "num_processes",
    "tpu_cores",
    "ipus",
    "devices",
    "progress_bar_refresh_rate",
    "enable_progress_bar",
    "weights_summary",
    "enable_model_summary",
    # 1.x flags that became one of the bundle's callbacks (rules.FLAG_CALLBACKS): moved with the rest where the call is
    # translated anyway, so that a value this tool cannot read (terminate_on_nan=opts.nan_check) adds the callback
    # when it is true, as legacy_trainer_kwargs reads it, instead of leaving the flag's TODO.
    *rules.FLAG_CALLBACKS,
)

Item = tuple[str, cst.BaseExpression, "cst.Arg | None"]


#: TODOs whose argument leaves the call (auto_scale_batch_size=, apex, resume_from_checkpoint=): they neither stop nor
#: need a translation, and a second run, which no longer sees the argument, decides as the first did.
LEAVE_THE_CALL = frozenset(
    {*rules.REMOVED_ARGS.values(), "trainer-apex", "trainer-amp-backend-variable", "trainer-resume"}
)


def settles(todos: Sequence[str]) -> bool:
    """Whether a run-time translation settles every TODO in ``todos`` (comment texts) but those whose argument
    leaves the call, and one of them is about a value this tool cannot read."""
    found = {rules.rule_of(text) for text in todos} - LEAVE_THE_CALL
    return bool(found) and found <= SETTLED and bool(found & UNREADABLE)


def meaningless(items: Sequence[Item]) -> bool:
    """Whether a literal among ``items`` had no meaning in 1.x (``progress_bar_refresh_rate=-1``,
    ``weights_summary="some"``): left to a person with its TODO, not turned into an error at run time."""
    for key, value, _ in items:
        known = value.evaluated_value if isinstance(value, (cst.SimpleString, cst.Integer)) else ...
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
            known = -1
        if key == "progress_bar_refresh_rate" and known is not ... and not (isinstance(known, int) and known >= 0):
            return True
        if key == "weights_summary" and known is not ... and known not in ("top", "full"):
            return True
    return False


def may_be_ddp_cpu(items: Sequence[Item], resolve: Callable[[cst.BaseExpression], set[Any] | None]) -> bool:
    """Whether ``accelerator=`` / ``distributed_backend=`` among ``items`` may hold "ddp_cpu" (its note goes with the
    translation: 1.x summed the CPU ranks' gradients, 2.x's ddp takes their mean)."""
    return any(
        "ddp_cpu" in (resolve(value) or ()) for key, value, _ in items if key in ("accelerator", "distributed_backend")
    )


def split(items: Sequence[Item], also: Sequence[str] = ()) -> tuple[list[Item], list[Item]]:
    """``items`` as (the settings that move into the translation, the others). ``callbacks=`` moves with them where
    a moved setting may add a callback (the progress bar's, the model summary's), so that it joins the call's own;
    the keys ``also`` names move too (``plugins=`` that may hold a strategy: trainer_call.py)."""
    adds = ("progress_bar_refresh_rate", "weights_summary", *rules.FLAG_CALLBACKS)
    adds_callbacks = any(item[0] in adds for item in items)
    moves = set(MOVED) | set(also) | ({"callbacks"} if adds_callbacks else set())
    return [item for item in items if item[0] in moves], [item for item in items if item[0] not in moves]


def translation(moved: Sequence[Item], namespace: str, indent: cst.Comma | None = None) -> cst.Call:
    """``legacy_trainer_kwargs(key=value, ..., [namespace=...,] [callbacks=...])`` for the moved settings, spelled as
    the user wrote them (a comment after one moves with it).

    Args:
        moved: the settings, as ``(key, value, original argument)``; ``callbacks=`` among them goes last (a progress
            bar the rate adds joins them).
        namespace: the file's Lightning tree (``namespace=`` is written where it is not ``lightning.pytorch``).
        indent: the comma between two arguments of the call (one argument per line stays one per line).
    """
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    ordered = [item for item in moved if item[0] != "callbacks"] + [item for item in moved if item[0] == "callbacks"]
    if namespace != "lightning.pytorch":
        at = len(ordered) - (1 if ordered and ordered[-1][0] == "callbacks" else 0)
        ordered.insert(at, ("namespace", cst.SimpleString(f'"{namespace}"'), None))
    args = [cst.Arg(keyword=cst.Name(key), value=value, equal=equal) for key, value, _ in ordered]
    outer = indent.whitespace_after if indent is not None else None
    if not isinstance(outer, cst.ParenthesizedWhitespace):  # a call on one line: the translation on one line too
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args = [arg.with_changes(comma=comma) for arg in args[:-1]] + [args[-1]]
        return cst.Call(func=cst.Name("legacy_trainer_kwargs"), args=args)
    # One argument per line, one level deeper than the call's own, and the closing parenthesis at the call's level.
    inner = outer.with_changes(last_line=cst.SimpleWhitespace(outer.last_line.value + "    "))
    after = [inner] * (len(args) - 1) + [outer]
    for index, (_, _, like) in enumerate(ordered):
        # A comment after a moved argument (gpus=args.gpus,  # -1: all) moves with it.
        written = like.comma.whitespace_after if like is not None and isinstance(like.comma, cst.Comma) else None
        if isinstance(written, cst.ParenthesizedWhitespace):
            after[index] = after[index].with_changes(first_line=written.first_line, empty_lines=written.empty_lines)
    args = [arg.with_changes(comma=cst.Comma(whitespace_after=ws)) for arg, ws in zip(args, after)]
    return cst.Call(func=cst.Name("legacy_trainer_kwargs"), args=args, whitespace_before_args=inner)
