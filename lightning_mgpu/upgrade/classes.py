"""The classes-and-hooks family: a LightningModule's, a DataModule's or a callback's class and its methods. The class
rewrites of :mod:`~lightning_mgpu.upgrade.hooks` (returned logs, epoch-end hooks, renamed hooks), several optimizers
turned into manual optimization (:mod:`~lightning_mgpu.upgrade.manual_optimization`), the hook parameters 2.x
dropped, ``optimizer_idx`` in an evaluation step, the 1.x ``*_step_end`` hooks.

Rule ids: hook-param, eval-step-optimizer-idx, step-end, manual-optimization (and the rules
:mod:`~lightning_mgpu.upgrade.hooks` and :mod:`~lightning_mgpu.upgrade.progress_bar_hooks` report, recorded here);
TODOs optimizer-idx, eval-step-optimizer-idx, step-end.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.findings import Finding
from lightning_mgpu.upgrade.hooks import (
    ClassResult,
    batch_end_shape,
    call_before_returns,
    class_methods,
    convert_epoch_ends,
    convert_log_returns,
    convert_renamed_hooks,
    drop_empty_super_calls,
    empty_super_hooks,
    own_returns,
    replace_method,
    with_comments,
    wrap_returns,
)
from lightning_mgpu.upgrade.leftover_spellings import drop_eval_optimizer_idx
from lightning_mgpu.upgrade.manual_optimization import FREQUENCY_READER, reads_frequencies_at_run_time
from lightning_mgpu.upgrade.manual_optimization import convert as manual_convert
from lightning_mgpu.upgrade.manual_optimization import convert_subclass as manual_convert_subclass
from lightning_mgpu.upgrade.progress_bar_hooks import convert as convert_progress_bar_dict
from lightning_mgpu.upgrade.progress_bar_hooks import with_last_base
from lightning_mgpu.upgrade.result_objects import convert_result_objects
from lightning_mgpu.upgrade.scopes import dotted as _dotted
from lightning_mgpu.upgrade.traverse import once_per_module, read_only_visit


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
    methods = {s.name.value: s for s in node.body.body if isinstance(s, cst.FunctionDef)}
    body = []
    for statement in node.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value in steps:
            kept = f"_{statement.name.value}_end_1x"
            if kept in methods and _never_returns_value(methods[kept]):
                # 1.x kept the step's own output where its step end gave None: the step calls it, returns its own.
                statement = call_before_returns(statement, kept)
            elif kept in methods:
                statement = wrap_returns(statement, kept)
        body.append(statement)
    return node.with_changes(body=node.body.with_changes(body=body))


#: 1.x's step-end hook -> the epoch end whose outputs list held what it returned.
_STEP_END_EPOCH = {
    "training_step_end": "training_epoch_end",
    "validation_step_end": "validation_epoch_end",
    "test_step_end": "test_epoch_end",
}
#: How a step end that does more than reduce converts (:func:`step_end_plan`).
MIXIN, EXPLICIT = "mixin", "explicit"
#: 1.x's names of the strategies that passed a step end the replicas' gathered outputs.
_DATA_PARALLEL_NAMES = frozenset({"dp", "ddp2", "ddp2_spawn"})
_DATA_PARALLEL_CLASSES = frozenset(
    {"DataParallelStrategy", "DataParallelPlugin", "DDP2Strategy", "DDP2Plugin", "LightningDataParallel"}
)


@once_per_module
def shows_data_parallel(module: cst.CSTNode) -> bool:
    """Whether a file names 1.x's dp/ddp2 anywhere: a ``"dp"``/``"ddp2"`` string (a strategy, accelerator or
    distributed_backend value, however it gets there) or a DataParallel/DDP2 strategy or plugin class."""

    class Finder(cst.CSTVisitor):
        found = False

        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            try:
                value = node.evaluated_value
            except Exception:  # noqa: BLE001  (a string libcst cannot evaluate is no strategy name)
                return
            self.found = self.found or value in _DATA_PARALLEL_NAMES

        def visit_Name(self, node: cst.Name) -> None:
            self.found = self.found or node.value in _DATA_PARALLEL_CLASSES

    finder = Finder()
    read_only_visit(module, finder)
    return finder.found


def _takes_one_output(func: cst.FunctionDef) -> bool:
    """``(self, outputs)``, ``(self, outputs, *args, **kwargs)``: the one positional argument 1.x passed."""
    params = func.params
    return (
        len(params.params) == 2
        and not params.posonly_params
        and not params.kwonly_params
        and not isinstance(params.star_arg, cst.ParamStar)
    )


def _calls_super(func: cst.FunctionDef, hook: str) -> bool:
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            nonlocal found
            if node.attr.value == hook and m.matches(node.value, m.Call(func=m.Name("super"))):
                found = True

    read_only_visit(func.body, Finder())
    return found


def _always_returns_value(func: cst.FunctionDef) -> bool:
    """Every ``return`` of the function gives a value (not None) and its body ends in one: what it gives always
    replaces the step's output, so ``return self._<step>_end_1x(X)`` is 1.x's ``X if end(X) is None else end(X)``."""
    body = func.body.body if isinstance(func.body, cst.IndentedBlock) else []
    last = body[-1] if body else None
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)):
        return False
    returns = list(own_returns(func))
    return all(r.value is not None and not m.matches(r.value, m.Name("None")) for r in returns)


def _never_returns_value(func: cst.FunctionDef) -> bool:
    """No ``return`` of the function gives a value: 1.x's loop kept the step's own output after it, so the step can
    call it and return its own output (``return`` of a yield-free body only; a generator is not a step end)."""
    if "yield" in cst.Module(body=[func]).code:
        return False
    return all(r.value is None or m.matches(r.value, m.Name("None")) for r in own_returns(func))


def _subclassed_in_file(module: cst.CSTNode, name: str) -> bool:
    """Whether another class of the file names ``name`` among its bases."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            nonlocal found
            if any((_dotted(b.value) or "").rsplit(".", 1)[-1] == name for b in node.bases):
                found = True

    read_only_visit(module, Finder())
    return found


def step_end_plan(
    ctx: UpgradeContext,
    node: cst.ClassDef,
    methods: dict[str, cst.FunctionDef],
    per_sample: set[str],
    has_optimizer_idx: bool,
) -> dict[str, str]:
    """How each 1.x ``*_step_end`` of a class that does more than reduce converts (rule step-end): kept as
    ``_<step>_end_1x``, and either :data:`MIXIN` (the class gets :class:`~lightning_mgpu.upgrade.step_ends.
    LegacyStepEnds`, which runs it after each step at run time, exact under every strategy, dp and ddp2 included) or
    :data:`EXPLICIT` (the step returns ``self._<step>_end_1x(X)``, or calls it and returns X where it never returns a
    value). A hook missing from the plan keeps its TODO
    (or is a reduce-only one, converted as before)."""
    module = ctx.scopes[0].node if ctx.scopes else node
    epoch_ends = ctx.epoch_ends.get(node.name.value, {})
    bases = {(_dotted(b.value) or "").rsplit(".", 1)[-1] for b in node.bases}
    # A class that is meant to be subclassed (in other files too) gets no step rewritten: its subclasses' steps
    # would not return the step end's result.
    abstract = "ABC" in bases or "abstractmethod" in cst.Module(body=[node]).code
    data_parallel = shows_data_parallel(module)

    def explicit_ok(hook: str, func: cst.FunctionDef) -> bool:
        # ``return self._<step>_end_1x(X)`` is exact where the class has the step, the hook always returns a value
        # (or never does: then the step calls it and returns X, as 1.x kept X), nothing in the file runs dp/ddp2
        # (there 1.x passed it the replicas' gathered outputs) and no class of the file overrides the step.
        return (
            hook.removesuffix("_end") in methods
            and (_always_returns_value(func) or _never_returns_value(func))
            and not data_parallel
            and not abstract
            and not _subclassed_in_file(module, node.name.value)
        )

    candidates: dict[str, cst.FunctionDef] = {}
    for hook in rules.STEP_END_HOOKS:
        func = methods.get(hook)
        if func is None or reduce_only(func):
            continue  # reduce-only: removed, or kept for per-sample outputs (leave_function_def)
        step = hook.removesuffix("_end")
        # Decision: a hook 1.x did not call with one output, one handing on to a base's step end, or a training
        # step end of several optimizers (1.x called it per optimizer; manual_optimization.py rewrites the step)
        # keeps its TODO.
        if not _takes_one_output(func) or _calls_super(func, hook):
            continue
        if step == "training_step" and (has_optimizer_idx or ctx.manual.kind(node.name.value)):
            continue
        candidates[hook] = func
    # A step that collects its outputs for a converted epoch end in its own body: the collected value must be the
    # step end's result, so the step returns it explicitly (where that is exact; else the TODO stays).
    # (An earlier run's collection: the step appends to self.<step>_outputs itself.)
    # (An epoch end whose outputs on_<stage>_batch_end collects gets what the loop got: the mixin's result.)
    collected = {
        h
        for h in candidates
        if h.removesuffix("_end") in methods
        and (
            (_STEP_END_EPOCH[h] in epoch_ends and not epoch_ends[_STEP_END_EPOCH[h]].batch_end)
            or f"self.{h.removesuffix('_end')}_outputs" in cst.Module(body=[methods[h.removesuffix("_end")]]).code
        )
    }
    plan = {h: EXPLICIT for h in collected if explicit_ok(h, candidates[h])}
    if not plan and not per_sample and "LegacyStepEnds" not in bases:
        for hook in sorted(collected):
            # Decision: where the step cannot return its step end's result (an abstract class, a subclass in the
            # file, dp/ddp2), an evaluation epoch end of the class's own takes its outputs from on_<stage>_batch_end
            # instead, which 2.x calls with what the loop got: the step end's result under LegacyStepEnds.
            shape = batch_end_shape(module, node, methods, _STEP_END_EPOCH[hook])
            if shape is not None and not explicit_ok(hook, candidates[hook]):
                ctx.epoch_ends.setdefault(node.name.value, {})[_STEP_END_EPOCH[hook]] = shape
                collected.discard(hook)
    # A step already returning its kept step end (per-sample, or an earlier run's explicit rewrite).
    returned = bool(per_sample) or (
        "LegacyStepEnds" not in bases and any(f"_{h}_1x" in methods for h in rules.STEP_END_HOOKS)
    )
    for hook, func in candidates.items():
        if hook in collected:
            continue
        if EXPLICIT in plan.values() or returned:
            # One class, one way: LegacyStepEnds would run a step end again after a step that returns it.
            if explicit_ok(hook, func):
                plan[hook] = EXPLICIT
        else:
            plan[hook] = MIXIN
    if MIXIN in plan.values():
        # A reduce-only step end is kept too: under dp/ddp2 LegacyStepEnds.combine_replica_outputs takes over from
        # the bundle's own loss reduction, and applies what the hook did (a sum stays a sum).
        for hook in rules.STEP_END_HOOKS:
            func = methods.get(hook)
            if func is not None and hook not in plan and reduce_only(func) and _takes_one_output(func):
                plan[hook] = MIXIN
                # Its epoch end, collected in the step, would get the step's output, not the reduced one 1.x
                # handed it: on_<stage>_batch_end collects what the loop got instead, where it can.
                shape = epoch_ends.get(_STEP_END_EPOCH[hook])
                if shape is not None and not shape.batch_end:
                    switched = batch_end_shape(module, node, methods, _STEP_END_EPOCH[hook])
                    if switched is not None:
                        ctx.epoch_ends.setdefault(node.name.value, {})[_STEP_END_EPOCH[hook]] = switched
    return plan


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
    step_ends = (
        step_end_plan(ctx, node, methods, per_sample, has_optimizer_idx) if bases - rules.NON_LIGHTNING_BASES else {}
    )
    # Recorded only from here on, where nothing can raise: leave_ClassDef pops what this pushed.
    ctx.class_depth += 1
    # A plain nn.Module (or no base): its training_epoch_end is the user's own, called by their own loop.
    ctx.lightning_class.append(bool(bases - rules.NON_LIGHTNING_BASES))
    if bases & {"LightningDataModule"} or bases & ctx.datamodules:
        ctx.datamodules.add(node.name.value)
    ctx.class_has_optimizer_idx.append(has_optimizer_idx)
    ctx.class_manual.append(ctx.manual.kind(node.name.value))
    ctx.class_refusal.append(ctx.manual.why(node.name.value))
    ctx.class_per_sample.append(per_sample)
    ctx.class_step_ends.append(step_ends)


def leave_class_def(ctx: UpgradeContext, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
    ctx.class_depth -= 1
    has_optimizer_idx = ctx.class_has_optimizer_idx.pop()
    manual = ctx.class_manual.pop()
    ctx.class_refusal.pop()
    per_sample = ctx.class_per_sample.pop()
    step_ends = ctx.class_step_ends.pop()
    if not ctx.lightning_class.pop():
        return updated
    explicit = {hook.removesuffix("_end") for hook, how in step_ends.items() if how == EXPLICIT}
    if per_sample or explicit:
        # Before the epoch-end rewrites: a step that collects its outputs collects what the step end gave.
        updated = step_end_into_step(updated, per_sample | explicit)
    if MIXIN in step_ends.values():
        updated = with_legacy_step_ends(ctx, updated)
    lines = {s.name.value: ctx.line(s) for s in original.body.body if isinstance(s, cst.FunctionDef)}
    comments: list[tuple[str, str]] = []
    # get_progress_bar_dict (progress_bar_hooks.py): LegacyProgressBarDict, after LegacyStepEnds, or its TODO.
    updated, bar_todo = convert_progress_bar_dict(ctx, original, updated)
    if bar_todo is not None:
        ctx.findings.append(Finding(lines.get("get_progress_bar_dict", ctx.line(original)), bar_todo, todo=True))
        comments.append(("get_progress_bar_dict", bar_todo))
    # A class manual_optimization.py converts runs several optimizers, whether or not its step read the index.
    updated = _hook_rewrites(ctx, original, updated, has_optimizer_idx or bool(manual), lines, comments)
    if manual:  # several optimizers -> manual optimization, as 1.x ran them: manual_optimization.py
        updated = _manual_optimization(ctx, original, updated, manual, lines, comments)
    return with_comments(updated, comments) if comments else updated


def with_legacy_step_ends(ctx: UpgradeContext, cls: cst.ClassDef) -> cst.ClassDef:
    """``cls`` with :class:`~lightning_mgpu.upgrade.step_ends.LegacyStepEnds` as its last positional base (last: a
    base that already has it, in this file or another, keeps a consistent MRO), imported from the bundle."""
    return with_last_base(ctx, cls, "lightning_mgpu.upgrade.step_ends", "LegacyStepEnds")


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
    file_node = ctx.scopes[0].node if ctx.scopes else original
    finetuning = original.name.value in finetuning_classes(file_node)
    for convert in (
        lambda c: convert_result_objects(c, ctx.result_plan.methods),  # result_objects.py
        lambda c: convert_finetuning(c) if finetuning else ClassResult(c),
        convert_log_returns,
        # Before the epoch-end and renamed-hook rewrites: they see the method without the super() call 2.x lacks.
        lambda c: drop_empty_super_calls(c, empty_super_hooks(unique_classes(file_node), original.name.value)),
        lambda c: convert_epoch_ends(c, has_optimizer_idx, ctx.epoch_ends.get(original.name.value)),
        # 1.0-1.1 code (era.py) ran on_epoch_start/on_epoch_end in training epochs only; later code in every loop.
        lambda c: convert_renamed_hooks(c, train_only=ctx.epoch_hooks_train_only),
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
        if manual == "base" and reads_frequencies_at_run_time(updated):
            # its configure_optimizers passes through the run-time reader of 1.x's "frequency" keys
            ctx.add_import("lightning_mgpu.upgrade.legacy_optimizers", FREQUENCY_READER, None)
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


#: Lightning's callbacks that call ``finetune_function`` (a file's own class of the name: a copy of Lightning's).
@once_per_module
def unique_classes(module: cst.CSTNode) -> dict[str, cst.ClassDef]:
    """The file's classes by name, but a name two classes share (which one a subclass means is not known)."""
    found: list[cst.ClassDef] = []

    class Finder(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            found.append(node)

    read_only_visit(module, Finder())
    names = [c.name.value for c in found]
    return {c.name.value: c for c in found if names.count(c.name.value) == 1}


_FINETUNING_BASES = frozenset({"BaseFinetuning", "BackboneFinetuning"})


@once_per_module
def finetuning_classes(module: cst.CSTNode) -> frozenset[str]:
    """The classes of a file that are finetuning callbacks: a copy of Lightning's ``BaseFinetuning`` of the file's
    own, and every class whose bases (followed through the file's classes) reach a class of that name."""
    bases: dict[str, set[str]] = {}

    class Finder(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            names = {(_dotted(b.value) or "").rsplit(".", 1)[-1] for b in node.bases if b.keyword is None}
            bases.setdefault(node.name.value, set()).update(names)

    read_only_visit(module, Finder())
    found = {name for name in bases if name in _FINETUNING_BASES}
    grown = True
    while grown:
        grown = False
        for name, above in bases.items():
            if name not in found and above & (found | _FINETUNING_BASES):
                found.add(name)
                grown = True
    return frozenset(found)


def _first_statement_index(body: cst.IndentedBlock) -> int:
    """Where a statement inserted at the top of a body goes: after its docstring."""
    first = body.body[0] if body.body else None
    docstring = (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
    return 1 if docstring else 0


def drop_index_param(
    func: cst.FunctionDef, hook: str, index: int, optimizers: str, optimizer: str
) -> tuple[cst.FunctionDef | None, bool]:
    """``func`` without its positional parameter ``index`` (1.x's optimizer index), the argument gone from its
    ``super().<hook>(...)`` calls, and where the body reads it, ``<name> = <optimizers>.index(<optimizer>)`` at its
    top (``optimizers``/``optimizer``: code that names the Trainer's optimizers and the parameter given the
    optimizer). Returns None where the shape is not one this takes (a ``super()`` call that passes another value in
    its place, a body on the ``def`` line), and whether the index was computed."""
    name = func.params.params[index].name.value
    params = [p for i, p in enumerate(func.params.params) if i != index]
    params[-1] = params[-1].with_changes(comma=func.params.params[-1].comma)  # a trailing comma, layout kept
    computed = uses(func.body, name, hook) > 0
    body = func.body.visit(DropSuperArgs(hook, {name}))
    assert isinstance(body, cst.BaseSuite)  # a suite stays a suite
    left = False

    class Left(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            nonlocal left
            if m.matches(call.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(hook))):
                left = left or len(call.args) > len(params) - 1 or any(a.star for a in call.args)

    read_only_visit(body, Left())
    if left:
        return None, False  # super().<hook>(..., 0) or (*args): the index it hands on is not this parameter
    if computed:
        if not isinstance(body, cst.IndentedBlock):
            return None, False
        line = cst.parse_statement(f"{name} = {optimizers}.index({optimizer})")
        statements = list(body.body)
        statements.insert(_first_statement_index(body), line)
        body = body.with_changes(body=statements)
    return func.with_changes(params=func.params.with_changes(params=params), body=body), computed


def _plain_positional(func: cst.FunctionDef, count: int) -> bool:
    """``func`` takes exactly ``count`` plain positional parameters (self included) and nothing else."""
    params = func.params
    return (
        len(params.params) == count
        and not params.posonly_params
        and not params.kwonly_params
        and isinstance(params.star_arg, cst.MaybeSentinel)
        and params.star_kwarg is None
        and not func.decorators
    )


class _VendoredFinetuning(cst.CSTTransformer):
    """In a file's own copy of 1.x's ``BaseFinetuning``: ``self.finetune_function(a, b, c, idx)`` ->
    ``self.finetune_function(a, b, c)`` (2.x's call) and 1.x's private ``_get_active_optimizers(optimizers,
    frequencies, batch_idx)`` -> ``enumerate(optimizers)``, its import inside the method gone: 2.x has no optimizer
    frequencies (its own BaseFinetuning loops over ``enumerate(trainer.optimizers)``), and 1.x's function gave every
    optimizer with its index where there were none."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if m.matches(updated.func, m.Attribute(value=m.Name("self"), attr=m.Name("finetune_function"))):
            if len(updated.args) == 4 and all(a.keyword is None and not a.star for a in updated.args):
                args = list(updated.args[:3])
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                self.changed = True
                return updated.with_changes(args=args)
        if (
            m.matches(updated.func, m.Name("_get_active_optimizers"))
            and 2 <= len(updated.args) <= 3
            and all(a.keyword is None and not a.star for a in updated.args)
        ):
            self.changed = True
            first = updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(
                func=cst.Name("enumerate"), args=[first], whitespace_before_args=cst.SimpleWhitespace("")
            )
        return updated

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if len(updated.body) == 1 and m.matches(
            updated.body[0],
            m.ImportFrom(
                module=m.Attribute(attr=m.Name("utilities"), value=m.Attribute(attr=m.Name("loops"))),
                names=[m.ImportAlias(name=m.Name("_get_active_optimizers"), asname=None)],
            ),
        ):
            self.changed = True
            return cst.RemoveFromParent()
        return updated


def convert_finetuning(cls: cst.ClassDef) -> ClassResult:
    """A finetuning callback's hooks (rule finetune-function): ``finetune_function(self, pl_module, epoch,
    optimizer, optimizer_idx)`` loses the index, which 2.x's BaseFinetuning no longer passes (it calls
    ``finetune_function(pl_module, current_epoch, optimizer)`` for each of ``trainer.optimizers``); a body that reads
    it computes it as ``pl_module.trainer.optimizers.index(optimizer)``, the index 1.x passed. A file's own copy of
    ``BaseFinetuning`` also calls it as 2.x does (:class:`_VendoredFinetuning`)."""
    result = ClassResult(cls)
    hook = "finetune_function"
    method = class_methods(cls).get(hook)
    if method is not None and _plain_positional(method, 5):
        names = [p.name.value for p in method.params.params]
        new, computed = drop_index_param(method, hook, 4, f"{names[1]}.trainer.optimizers", names[3])
        if new is None:
            result.todos.append((hook, rules.todo_text("finetune-function")))
        else:
            result.node = replace_method(result.node, hook, [new])
            how = f", computed as {names[1]}.trainer.optimizers.index({names[3]})" if computed else ""
            result.changes.append(
                (hook, "finetune-function", f"{hook}: dropped {names[4]} (2.x does not pass it){how}")
            )
    elif method is not None and not _plain_positional(method, 4):
        # (self, pl_module, epoch, optimizer, *args), a default, a decorator: what 2.x's call binds is not known.
        result.todos.append((hook, rules.todo_text("finetune-function")))
    if cls.name.value == "BaseFinetuning":
        vendored = _VendoredFinetuning()
        node = result.node.visit(vendored)
        assert isinstance(node, cst.ClassDef)
        if vendored.changed:
            result.node = node
            result.changes.append(
                (
                    "on_train_epoch_start",
                    "finetune-function",
                    "BaseFinetuning (a copy of 1.x's): finetune_function called as 2.x calls it, for each optimizer",
                )
            )
        if "_get_active_optimizers" in cst.Module(body=[result.node]).code:
            result.todos.append(("on_train_epoch_start", rules.todo_text("finetune-function")))
    return result


def leave_function_def(
    ctx: UpgradeContext, original: cst.FunctionDef, updated: cst.FunctionDef
) -> cst.FunctionDef | cst.RemovalSentinel:
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
    if hook in rules.STEP_END_HOOKS and hook in ctx.class_step_ends[-1]:
        # step_end_plan: kept as _<hook>_1x, run after each step by LegacyStepEnds or returned by the step.
        how = ctx.class_step_ends[-1][hook]
        where = (
            "LegacyStepEnds runs it after each step"
            if how == MIXIN
            else "the step calls it and returns its own output"
            if _never_returns_value(updated)
            else "the step returns what it gives"
        )
        ctx.change(original, "step-end", f"{hook} -> _{hook}_1x: {where}, as 1.x called it")
        return updated.with_changes(name=cst.Name(f"_{hook}_1x"))
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
    if hook == "on_before_optimizer_step":
        computed_index = _optimizer_step_index(ctx, original, updated)
        if computed_index is not None:
            return computed_index
    if hook == "configure_gradient_clipping" and _plain_positional(updated, 5):
        # 1.x's (self, optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm), called with the index
        # second whatever its name; 2.x passes the same optimizer, and the two values by keyword. A body that reads
        # the index computes it from the Trainer's optimizers (the index 1.x passed, among them).
        order = [p.name.value for p in updated.params.params]
        without, index_read = drop_index_param(updated, hook, 2, "self.trainer.optimizers", order[1])
        if without is not None:
            how = f", computed as self.trainer.optimizers.index({order[1]}), as 1.x passed it" if index_read else ""
            ctx.change(original, "hook-param", f"{hook}: dropped {order[2]} (gone from 2.x){how}")
            return without
    names = {p.name.value for p in updated.params.params}
    dropped = set()
    computed = None  # lr_scheduler_step: the scheduler parameter its optimizer_idx is computed from
    for name in rules.HOOK_DROPPED_PARAMS[hook]:
        if name not in names:
            continue
        if uses(updated.body, name, hook):
            if hook == "lr_scheduler_step" and name == "optimizer_idx":
                computed = _scheduler_param(updated)
                if computed is not None:
                    # Decision: 1.x passed the index of the scheduler's optimizer among configure_optimizers'
                    # (its config's opt_idx, matched by identity with scheduler.optimizer): the body computes it.
                    dropped.add(name)
                    continue
            if name == "optimizer_idx":
                why = ctx.class_refusal[-1] if hook == "training_step" and ctx.class_refusal else ""
                # the tool's reason for not converting the class (manual_optimization.refusal) follows the TODO
                detail = f"(not converted: {why})" if why else ""
                ctx.todo(original, rules.todo_text("optimizer-idx", hook=hook), detail=detail)
            continue
        dropped.add(name)
    if not dropped or (hook == "backward" and "optimizer_idx" not in names):
        return updated  # backward(self, loss, optimizer) without optimizer_idx may be a 2.x signature already
    params = [p for p in updated.params.params if p.name.value not in dropped]
    if params:
        params[-1] = params[-1].with_changes(comma=updated.params.params[-1].comma)
    body = updated.body.visit(DropSuperArgs(hook, dropped))
    ctx.change(original, "hook-param", f"{hook}: dropped {', '.join(sorted(dropped))} (gone from the 2.x signature)")
    if computed is not None and isinstance(body, cst.IndentedBlock):
        line = cst.parse_statement(f"optimizer_idx = self.trainer.optimizers.index({computed}.optimizer)")
        statements = list(body.body)
        first = statements[0] if statements else None
        docstring = (
            isinstance(first, cst.SimpleStatementLine)
            and isinstance(first.body[0], cst.Expr)
            and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        )
        statements.insert(1 if docstring else 0, line)
        body = body.with_changes(body=statements)
        ctx.change(
            original, "hook-param", f"{hook}: optimizer_idx computed from {computed}.optimizer, as 1.x passed it"
        )
    return updated.with_changes(params=updated.params.with_changes(params=params), body=body)


def _optimizer_step_index(
    ctx: UpgradeContext, original: cst.FunctionDef, updated: cst.FunctionDef
) -> cst.FunctionDef | None:
    """1.x's ``on_before_optimizer_step`` with its index: a callback's ``(self, trainer, pl_module, optimizer,
    opt_idx)`` (whatever the index's name) or a module's ``(self, optimizer, optimizer_idx)`` whose body reads it.
    The index goes; a body that reads it computes it from the Trainer's optimizers (rule hook-param): 1.x passed the
    optimizer's index among them (automatic and manual optimization alike), and 2.x passes the same optimizer
    object. None where the hook has another shape (drop_params's handling, and its TODO, stays)."""
    names = [p.name.value for p in updated.params.params]
    if _plain_positional(updated, 5) and names[1] == "trainer":
        optimizers = f"{names[1]}.optimizers"  # the hook's trainer parameter
    elif (
        _plain_positional(updated, 3)
        and names[2] == "optimizer_idx"
        and uses(updated.body, names[2], "on_before_optimizer_step")
    ):
        optimizers = "self.trainer.optimizers"
    else:
        return None
    new, computed = drop_index_param(updated, "on_before_optimizer_step", len(names) - 1, optimizers, names[-2])
    if new is None:
        return None
    how = f", computed as {optimizers}.index({names[-2]}), as 1.x passed it" if computed else ""
    ctx.change(original, "hook-param", f"on_before_optimizer_step: dropped {names[-1]} (gone from 2.x){how}")
    return new


def _scheduler_param(func: cst.FunctionDef) -> str | None:
    """1.x's ``lr_scheduler_step(self, scheduler, optimizer_idx, metric)``: the scheduler's parameter, where the
    method has that shape and a block body the computed index can go into."""
    names = [p.name.value for p in func.params.params]
    params = func.params
    if len(names) != 4 or names[2] != "optimizer_idx" or not isinstance(func.body, cst.IndentedBlock):
        return None
    if not isinstance(params.star_arg, cst.MaybeSentinel) or params.kwonly_params or params.star_kwarg is not None:
        return None  # (self, scheduler, optimizer_idx, metric, *args): not 1.x's signature
    return names[1]
