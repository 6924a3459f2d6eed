"""The classes-and-hooks family: a LightningModule's, a DataModule's or a callback's class and its methods. The class
rewrites of :mod:`~lightning_mgpu.upgrade.hooks` (returned logs, epoch-end hooks, renamed hooks), several optimizers
turned into manual optimization (:mod:`~lightning_mgpu.upgrade.manual_optimization`), ``track_grad_norm``'s hook
(:mod:`~lightning_mgpu.upgrade.grad_norm`), the hook parameters 2.x dropped, ``optimizer_idx`` in an evaluation step,
the 1.x ``*_step_end`` hooks, and the removed ``@auto_move_data`` decorator.

Rule ids: hook-param, eval-step-optimizer-idx, step-end, track-grad-norm, manual-optimization (and the rules
:mod:`~lightning_mgpu.upgrade.hooks` reports, recorded here); TODOs optimizer-idx, eval-step-optimizer-idx, step-end,
auto-move-data.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.findings import Finding
from lightning_mgpu.upgrade.grad_norm import add_hook
from lightning_mgpu.upgrade.hooks import (
    convert_epoch_ends,
    convert_log_returns,
    convert_renamed_hooks,
    with_comments,
    wrap_returns,
)
from lightning_mgpu.upgrade.leftover_spellings import drop_eval_optimizer_idx
from lightning_mgpu.upgrade.manual_optimization import convert as manual_convert
from lightning_mgpu.upgrade.manual_optimization import convert_subclass as manual_convert_subclass
from lightning_mgpu.upgrade.result_objects import convert_result_objects
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.traverse import read_only_visit


def uses(node: cst.CSTNode, name: str, hook: str) -> int:
    """Uses of ``name`` in ``node``, not counting it passed on to ``super().<hook>(...)``."""

    class Counter(cst.CSTVisitor):
        count = 0

        def visit_Call(self, call: cst.Call) -> bool | None:
            if m.matches(call.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(hook))):
                for arg in call.args:
                    if not (isinstance(arg.value, cst.Name) and arg.value.value == name):
                        read_only_visit(arg.value, self)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                self.count += 1

    counter = Counter()
    read_only_visit(node, counter)
    return counter.count


class DropSuperArgs(cst.CSTTransformer):
    """Removes ``names`` from the arguments of ``super().<hook>(...)`` calls."""

    def __init__(self, hook: str, names: set[str]) -> None:
        super().__init__()
        self.hook, self.names = hook, names

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not m.matches(updated.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(self.hook))):
            return updated
        kept = [
            a
            for a in updated.args
            if not (
                (isinstance(a.value, cst.Name) and a.value.value in self.names and a.keyword is None)
                or (a.keyword is not None and a.keyword.value in self.names)
            )
        ]
        if kept and len(kept) < len(updated.args):
            kept[-1] = kept[-1].with_changes(comma=updated.args[-1].comma)
        return updated.with_changes(args=kept)


def reduce_only(func: cst.FunctionDef) -> bool:
    """Whether a ``*_step_end(self, outputs)`` body only reduces what the replicas returned (a mean or a sum of the
    outputs, or of entries of them), which the bundle's dp/ddp2 already do exactly."""
    params = func.params.params
    if len(params) != 2:
        return False
    bound = {params[1].name.value}

    def reduced(expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Name):
            return expr.value in bound
        if isinstance(expr, cst.Subscript):
            return reduced(expr.value) and all(
                isinstance(e.slice, cst.Index) and isinstance(e.slice.value, (cst.SimpleString, cst.Integer))
                for e in expr.slice
            )
        if isinstance(expr, cst.Call) and not expr.args and isinstance(expr.func, cst.Attribute):
            return expr.func.attr.value in ("mean", "sum") and reduced(expr.func.value)
        if isinstance(expr, cst.Call) and _dotted(expr.func) in ("torch.mean", "torch.sum") and len(expr.args) == 1:
            return reduced(expr.args[0].value)
        if isinstance(expr, cst.Dict):
            return all(isinstance(e, cst.DictElement) and reduced(e.value) for e in expr.elements)
        return False

    body = func.body.body if isinstance(func.body, cst.IndentedBlock) else []
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for small in statement.body:
            if (
                index == 0
                and isinstance(small, cst.Expr)
                and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
            ):
                continue  # the docstring
            if isinstance(small, cst.Pass):
                continue
            if isinstance(small, cst.Return):
                if small.value is None or not reduced(small.value):
                    return False
                continue
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and reduced(small.value):
                target = small.targets[0].target
                if isinstance(target, cst.Name):
                    bound.add(target.value)
                    continue
                if isinstance(target, cst.Subscript) and reduced(target):
                    continue
            return False
    return True


def per_sample_steps(methods: dict[str, cst.FunctionDef]) -> set[str]:
    """The steps of a class that have a 1.x ``<step>_end`` and compute a loss with ``reduction="none"``: what they
    return is per sample, so a step end that means it does more than combine the replicas' scalars, and must keep
    running after each step."""

    class Finder(cst.CSTVisitor):
        found = False

        def visit_Arg(self, node: cst.Arg) -> None:
            if (
                node.keyword is not None
                and node.keyword.value == "reduction"
                and isinstance(node.value, cst.SimpleString)
                and node.value.evaluated_value == "none"
            ):
                self.found = True

    steps: set[str] = set()
    for name in ("training_step", "validation_step", "test_step"):
        if name in methods and f"{name}_end" in methods:
            finder = Finder()
            read_only_visit(methods[name].body, finder)
            if finder.found:
                steps.add(name)
    return steps


def step_end_into_step(node: cst.ClassDef, steps: set[str]) -> cst.ClassDef:
    """Each step of ``steps`` whose ``<step>_end`` was kept as ``_<step>_end_1x`` returns what that gives, as 1.x
    called the step end on each step's output."""
    names = {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)}
    body = []
    for statement in node.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value in steps:
            kept = f"_{statement.name.value}_end_1x"
            if kept in names:
                statement = wrap_returns(statement, kept)
        body.append(statement)
    return node.with_changes(body=node.body.with_changes(body=body))


def visit_class_def(ctx: UpgradeContext, node: cst.ClassDef) -> None:
    bases = {(_dotted(b.value) or "").rsplit(".", 1)[-1] for b in node.bases}
    methods = {s.name.value: s for s in node.body.body if isinstance(s, cst.FunctionDef)}
    step = methods.get("training_step")
    has_optimizer_idx = (
        step is not None
        and any(p.name.value == "optimizer_idx" for p in step.params.params)
        and uses(step.body, "optimizer_idx", "training_step") > 0
    )
    per_sample = per_sample_steps(methods)
    # Recorded only from here on, where nothing can raise: leave_ClassDef pops what this pushed.
    ctx.class_depth += 1
    # A plain nn.Module (or no base): its training_epoch_end is the user's own, called by their own loop.
    ctx.lightning_class.append(bool(bases - rules.NON_LIGHTNING_BASES))
    if bases & {"LightningDataModule"} or bases & ctx.datamodules:
        ctx.datamodules.add(node.name.value)
    ctx.class_has_optimizer_idx.append(has_optimizer_idx)
    ctx.class_manual.append(ctx.manual.kind(node.name.value))
    ctx.class_per_sample.append(per_sample)


def leave_class_def(ctx: UpgradeContext, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
    ctx.class_depth -= 1
    if ctx.grad_norm is not None and original.name.value == ctx.grad_norm.module_class:  # grad_norm.py
        updated = add_hook(updated, ctx.grad_norm.norm)
        ctx.add_import(f"{ctx.namespace}.utilities", "grad_norm", None)
        ctx.change(original, "track-grad-norm", "on_before_optimizer_step logs grad_norm(self, ...): track_grad_norm")
    has_optimizer_idx = ctx.class_has_optimizer_idx.pop()
    manual = ctx.class_manual.pop()
    per_sample = ctx.class_per_sample.pop()
    if not ctx.lightning_class.pop():
        return updated
    if per_sample:
        updated = step_end_into_step(updated, per_sample)
    lines = {s.name.value: ctx.line(s) for s in original.body.body if isinstance(s, cst.FunctionDef)}
    comments: list[tuple[str, str]] = []
    updated = _hook_rewrites(ctx, original, updated, has_optimizer_idx, lines, comments)
    if manual:  # several optimizers -> manual optimization, as 1.x ran them: manual_optimization.py
        updated = _manual_optimization(ctx, original, updated, manual, lines, comments)
    return with_comments(updated, comments) if comments else updated


def _hook_rewrites(
    ctx: UpgradeContext,
    original: cst.ClassDef,
    updated: cst.ClassDef,
    has_optimizer_idx: bool,
    lines: dict[str, int],
    comments: list[tuple[str, str]],
) -> cst.ClassDef:
    """hooks.py's class rewrites (returned logs, epoch ends, renamed hooks), each on what the one before left; their
    findings recorded at the method's line, their TODOs added to ``comments``."""
    for convert in (
        lambda c: convert_result_objects(c, ctx.result_plan.methods),  # result_objects.py
        convert_log_returns,
        lambda c: convert_epoch_ends(c, has_optimizer_idx, ctx.epoch_ends.get(original.name.value)),
        convert_renamed_hooks,
    ):
        try:
            result = convert(updated)
        except Exception as err:  # noqa: BLE001  (one rewrite of the class failed: the others still run)
            ctx.internal_error(original, err)
            ctx.failed.discard(id(original))  # a second converter's failure gets its TODO too
            continue
        updated = result.node
        for method, rule, message in result.changes:
            ctx.findings.append(Finding(lines.get(method, ctx.line(original)), message, rule=rule))
        for method, text in result.todos:
            ctx.findings.append(Finding(lines.get(method, ctx.line(original)), text, todo=True))
            comments.append((method, text))
        for method, text in result.notes:  # the comment is in the rewritten body already
            ctx.findings.append(Finding(lines.get(method, ctx.line(original)), text, note=True))
        for module, name in result.imports:
            ctx.add_import(f"{ctx.namespace}.{module}", name, None)
    return updated


def _manual_optimization(
    ctx: UpgradeContext,
    original: cst.ClassDef,
    updated: cst.ClassDef,
    manual: str,
    lines: dict[str, int],
    comments: list[tuple[str, str]],
) -> cst.ClassDef:
    """The class (``manual``: what manual_optimization.py makes of it) turned to manual optimization; where it cannot
    be, the optimizer-idx TODO is added to ``comments``."""
    try:
        converted = (
            manual_convert(updated, ctx.manual.clip) if manual == "base" else manual_convert_subclass(updated, manual)
        )
    except Exception as err:  # noqa: BLE001  (the class stays as the other rewrites left it, with its TODO)
        ctx.internal_error(original, err)
        converted = None
    changed = False
    if converted is None:  # the other rewrites left a shape this rule does not take: today's TODO
        text = rules.todo_text("optimizer-idx", hook="training_step")
        ctx.findings.append(Finding(lines.get("training_step", ctx.line(original)), text, todo=True))
        comments.append(("training_step", text))
    else:
        changed, updated = converted is not updated, converted
    if changed and manual == "base":
        ctx.change(
            original,
            "manual-optimization",
            "training_step(..., optimizer_idx) -> manual optimization, each optimizer as 1.x stepped it",
        )
    elif changed:
        ctx.change(original, "manual-optimization", f"a subclass of a manual-optimization class: {manual}")
    return updated


def leave_function_def(
    ctx: UpgradeContext, original: cst.FunctionDef, updated: cst.FunctionDef
) -> cst.FunctionDef | cst.RemovalSentinel:
    kept = [d for d in updated.decorators if _dotted(d.decorator) not in ctx.auto_move_data]
    if len(kept) != len(updated.decorators):
        ctx.todo(original, rules.todo_text("auto-move-data"))
        updated = updated.with_changes(decorators=kept)
    if ctx.class_depth == 0 or not ctx.lightning_class[-1]:
        return updated
    hook = updated.name.value
    if hook in rules.HOOK_DROPPED_PARAMS:
        return drop_params(ctx, original, updated, hook)
    if hook in rules.EVAL_STEP_HOOKS and any(p.name.value == "optimizer_idx" for p in updated.params.params):
        dropped = drop_eval_optimizer_idx(updated)
        if dropped is None:
            ctx.todo(original, rules.todo_text("eval-step-optimizer-idx", hook=hook))
            return updated
        ctx.change(original, "eval-step-optimizer-idx", f"{hook}: dropped optimizer_idx, its uses read its default")
        return dropped
    if hook in rules.STEP_END_HOOKS:
        if reduce_only(updated) and hook.removesuffix("_end") in ctx.class_per_sample[-1]:
            # The step's outputs are per sample (reduction="none"): the reduction is kept, after each step.
            ctx.change(
                original,
                "step-end",
                f"{hook} -> _{hook}_1x, applied to what the step returns: its outputs are per sample",
            )
            return updated.with_changes(name=cst.Name(f"_{hook}_1x"))
        if reduce_only(updated):
            ctx.change(
                original,
                "step-end",
                f"{hook} removed: it only reduced the replicas' outputs, which lightning_mgpu's dp does exactly",
            )
            return cst.RemoveFromParent()
        ctx.todo(original, rules.todo_text("step-end", hook=hook))
    return updated


def drop_params(ctx: UpgradeContext, original: cst.FunctionDef, updated: cst.FunctionDef, hook: str) -> cst.FunctionDef:
    if hook == "training_step" and ctx.class_manual[-1] in ("base", "helper"):
        return updated  # the step becomes _training_step_1x, index and all, when the class is left
    names = {p.name.value for p in updated.params.params}
    dropped = set()
    for name in rules.HOOK_DROPPED_PARAMS[hook]:
        if name not in names:
            continue
        if uses(updated.body, name, hook):
            if name == "optimizer_idx":
                ctx.todo(original, rules.todo_text("optimizer-idx", hook=hook))
            continue
        dropped.add(name)
    if not dropped or (hook == "backward" and "optimizer_idx" not in names):
        return updated  # backward(self, loss, optimizer) without optimizer_idx may be a 2.x signature already
    params = [p for p in updated.params.params if p.name.value not in dropped]
    if params:
        params[-1] = params[-1].with_changes(comma=updated.params.params[-1].comma)
    body = updated.body.visit(DropSuperArgs(hook, dropped))
    ctx.change(original, "hook-param", f"{hook}: dropped {', '.join(sorted(dropped))} (gone from the 2.x signature)")
    return updated.with_changes(params=updated.params.with_changes(params=params), body=body)
