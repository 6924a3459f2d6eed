"""The metrics-calls family: a torchmetrics classification metric built without ``task=`` (torchmetrics 0.11 made it
required) gets ``task="multiclass"`` where the call or its context names the class count, a stand-in that reads the
task off the inputs where nothing does (:mod:`~lightning_mgpu.upgrade.legacy_metrics`), and torchmetrics 0.10's own
keywords dropped where they say nothing beside it. Which names are torchmetrics' is read from this file's imports
(and a notebook's other cells).

Rule ids: metrics-legacy-args, metrics-task, metrics-num-classes, metrics-inferred-task; TODO metrics-task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.metrics import with_inferred_task, with_task
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.nodes import kwarg as _kwarg
from lightning_mgpu.upgrade.nodes import quoted as _quoted
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.scopes import literal as _literal

#: The tasks torchmetrics >= 0.11 takes (its first positional parameter in the classes).
TASKS = frozenset({"binary", "multiclass", "multilabel"})
#: torchmetrics <= 0.10 keywords that 0.11 removed -> the values that say nothing beside task="multiclass".
#: compute_on_step=False only made forward() return None instead of the batch's value: the metric is the same.
LEGACY_METRIC_ARGS: dict[str, tuple[Any, ...]] = {
    "multiclass": (True,),
    "is_multiclass": (True,),
    "mdmc_average": ("global",),
    "subset_accuracy": (False,),
    "compute_on_step": (True, False),
}


def _task_name(node: cst.BaseExpression) -> bool:
    """Whether ``node`` is a string literal naming a torchmetrics >= 0.11 task, in any case."""
    if not isinstance(node, cst.SimpleString):
        return False
    value = node.evaluated_value
    return isinstance(value, str) and value.lower() in TASKS


def is_torchmetrics(ctx: UpgradeContext, func: str) -> bool:
    head = func.split(".")[0]
    if head == "torchmetrics":
        return True
    if "." in func:
        return False
    return any(module.startswith("torchmetrics") and name == func for module, name, _ in metric_names(ctx))


def add_metric_names(ctx: UpgradeContext, names: Sequence[str]) -> None:
    """torchmetrics names imported elsewhere (a notebook's other cells), known as if this source imported them."""
    ctx.torchmetrics_imports += [("torchmetrics", rules.TORCHMETRICS_RENAMED.get(n, n)) for n in names]


def metric_names(ctx: UpgradeContext) -> list[tuple[str, str, None]]:
    return [(entry[0], entry[1], None) for entry in ctx.renamed.values() if entry[0].startswith("torchmetrics")] + [
        (m, n, None) for m, n in ctx.torchmetrics_imports
    ]


def _without(call: cst.Call, dropped: list[cst.Arg]) -> cst.Call:
    """``call`` without the arguments ``dropped``, its last argument without a trailing comma."""
    kept = [a for a in call.args if a not in dropped]
    if kept:
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=kept)


def metric_call(ctx: UpgradeContext, original: cst.Call, updated: cst.Call) -> cst.Call:
    """A torchmetrics classification metric without ``task=``: ``num_classes=N`` makes it multiclass, as 1.x read
    it; with neither, a TODO."""
    keywords = {a.keyword.value for a in updated.args if a.keyword is not None}
    if "task" in keywords or any(a.star for a in updated.args):
        return updated
    # The task given by position (torchmetrics >= 0.11: Accuracy("binary", ...), accuracy(p, t, "multiclass", ...)):
    # already 2.x. No 0.10 signature took one of these strings by position. torchmetrics reads the name in any case
    # (ClassificationTask.from_str): Accuracy("MULTICLASS", ...) is a multiclass accuracy.
    if any(a.keyword is None and _task_name(a.value) for a in updated.args):
        return updated
    name = (_dotted(updated.func) or "").split(".")[-1]
    # torchmetrics <= 0.10's own keywords, which 0.11's metrics refuse: dropped where they say nothing beside
    # task="multiclass"; any other value decides the task (multiclass=False: binary) and leaves the TODO.
    legacy = [a for a in updated.args if a.keyword is not None and a.keyword.value in LEGACY_METRIC_ARGS]
    if any(_literal(a.value) not in LEGACY_METRIC_ARGS[a.keyword.value] for a in legacy if a.keyword is not None):
        ctx.todo(original, rules.todo_text("metrics-task", name=name))
        return updated
    if legacy and ("num_classes" in keywords or ctx.class_counts.get(id(original)) is not None):
        updated = _without(updated, legacy)
        ctx.change(original, "metrics-legacy-args", f"{name}: " + ", ".join(_code(a).strip(", ") for a in legacy))
    if "num_classes" in keywords and name[0].isupper():
        if any(a.keyword is None for a in updated.args):
            # A 0.10 class given a value by position (Accuracy(0.5, num_classes=3): threshold): 0.11's classes take
            # the task first, so that value would become the task. Which keyword it was is for a person to say.
            ctx.todo(original, rules.todo_text("metrics-task", name=name))
            return updated
        args = [
            _kwarg("task", _quoted("multiclass")).with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            ),
            *updated.args,
        ]
        ctx.change(original, "metrics-task", f'{name}(num_classes=...) -> {name}(task="multiclass", num_classes=...)')
        return updated.with_changes(args=args)
    # The class count read from the call (a functional metric) or around it: metrics.py (metrics-num-classes).
    counted = with_task(updated, name, ctx.class_counts.get(id(original)))
    if counted is not None:
        ctx.change(original, "metrics-num-classes", f'{name}(...) -> {name}(task="multiclass", num_classes=...)')
        return counted
    # No count anywhere: a stand-in that reads the task off the inputs as torchmetrics <= 0.10 did (metrics.py).
    # Decision: compute_on_step= is dropped for it too (False only made forward() return None instead of the
    # batch's value; the stand-in's state and compute() are the same); any other legacy keyword decides the task.
    said = [a for a in legacy if a.keyword is not None and a.keyword.value == "compute_on_step"]
    plain = _without(updated, said) if said and len(said) == len(legacy) else updated
    inferred = with_inferred_task(plain, name)
    if inferred is not None:
        if plain is not updated:
            ctx.change(original, "metrics-legacy-args", f"{name}: " + ", ".join(_code(a).strip(", ") for a in said))
        ctx.add_import("lightning_mgpu.upgrade.legacy_metrics", inferred[1], None)
        ctx.change(
            original, "metrics-inferred-task", f"{name}(...) -> {inferred[1]}(...): the task read off the inputs"
        )
        return inferred[0]
    ctx.todo(original, rules.todo_text("metrics-task", name=name))
    return updated
