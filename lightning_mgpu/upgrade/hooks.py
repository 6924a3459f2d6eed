"""Class-level rewrites of ``lightning-mgpu upgrade``: the hooks Lightning 2.0 removed or renamed.

Each function takes one class (libcst ``ClassDef``, already rewritten inside) and returns it rewritten, with what it
did: ``(method name, rule, message)`` for each rewrite and ``(method name, comment text)`` for each TODO left at a
method. The transformer calls them in
a fixed order from ``leave_ClassDef``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.manual_optimization import HELPER as MANUAL_STEP
from lightning_mgpu.upgrade.scopes import dotted, literal
from lightning_mgpu.upgrade.traverse import FunctionBodyTransformer, FunctionBodyVisitor, read_only_visit

#: epoch-end hook -> (its step, the 2.x hook, the attribute that collects the step's outputs).
EPOCH_ENDS = {
    "training_epoch_end": ("training_step", "on_train_epoch_end", "training_step_outputs"),
    "validation_epoch_end": ("validation_step", "on_validation_epoch_end", "validation_step_outputs"),
    "test_epoch_end": ("test_step", "on_test_epoch_end", "test_step_outputs"),
}


@dataclass
class ClassResult:
    """A class after the hook rewrites, and what happened to it."""

    node: cst.ClassDef
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # (method, rule, message)
    todos: list[tuple[str, str]] = field(default_factory=list)  # (method, comment text)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (method, note text), written by the rewrite
    imports: list[tuple[str, str]] = field(default_factory=list)  # (module below the namespace, name)


def class_methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
    return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}


def replace_method(cls: cst.ClassDef, name: str, new: list[cst.BaseStatement]) -> cst.ClassDef:
    body = list(cls.body.body)
    index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == name)
    body[index : index + 1] = new
    return cls.with_changes(body=cls.body.with_changes(body=body))


def as_block(func: cst.FunctionDef) -> cst.FunctionDef:
    """``def f(self): a; return b`` with its statements on lines of their own, in an indented block: the rewrites
    insert statements into a body and rewrite its ``return`` lines (a one-line body has neither)."""
    if isinstance(func.body, cst.IndentedBlock):
        return func
    suite = func.body
    assert isinstance(suite, cst.SimpleStatementSuite)
    lines = [
        cst.SimpleStatementLine(body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]) for small in suite.body
    ]
    lines[-1] = lines[-1].with_changes(trailing_whitespace=suite.trailing_whitespace)
    return func.with_changes(body=cst.IndentedBlock(body=lines))


def _uses_name(node: cst.CSTNode, name: str) -> bool:
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            nonlocal found
            found = found or n.value == name

    read_only_visit(node, Finder())
    return found


class _NameUses(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.seen = 0

    def visit_Name(self, node: cst.Name) -> None:
        self.seen += node.value == self.name

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def name_uses(node: cst.CSTNode, name: str) -> int:
    """How often ``name`` is read or written under ``node`` (an attribute's name and a keyword's are not the name)."""
    uses = _NameUses(name)
    read_only_visit(node, uses)
    return uses.seen


def _param_names(func: cst.FunctionDef) -> list[str]:
    return [p.name.value for p in func.params.params]


def own_returns(func: cst.FunctionDef) -> Iterator[cst.Return]:
    """The return statements of ``func`` itself (not of functions or classes nested in it)."""
    found: list[cst.Return] = []

    class Finder(FunctionBodyVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

    read_only_visit(func, Finder(func))
    return iter(found)


class _WrapReturns(FunctionBodyTransformer):
    """``return X`` -> ``return self.<method>(X)`` in the one function it is run on (``return`` and ``return None``,
    a skipped step, stay)."""

    def __init__(self, method: str) -> None:
        super().__init__()
        self.method = method

    def leave_Return(self, original: cst.Return, updated: cst.Return) -> cst.Return:
        if updated.value is None or m.matches(updated.value, m.Name("None")):
            return updated
        call = cst.Call(
            func=cst.Attribute(value=cst.Name("self"), attr=cst.Name(self.method)), args=[cst.Arg(updated.value)]
        )
        return updated.with_changes(value=call)


def wrap_returns(func: cst.FunctionDef, method: str) -> cst.FunctionDef:
    """``func`` with each of its own ``return X`` returning ``self.<method>(X)`` instead."""
    return func.visit(_WrapReturns(method))  # type: ignore[return-value]  # a FunctionDef stays a FunctionDef


class _BeforeEachReturn(FunctionBodyTransformer):
    """Before each ``return X`` of one function, a statement about X (``statement`` with ``{}`` for X's code; X
    evaluated once, as ``step_output``), then ``return X``; ``return`` and ``return None`` (a skipped step: 1.x left it
    out of the outputs and called no step end on it) stay."""

    def __init__(self, statement: str) -> None:
        super().__init__()
        self.statement = statement

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Return):
            return updated
        value = updated.body[0].value
        if value is None or literal(value) is None:
            return updated
        code = cst.Module(body=[]).code_for_node(value)
        lines = []
        if not isinstance(value, cst.Name):
            lines.append(cst.parse_statement(f"step_output = {code}"))
            code = "step_output"
        lines.append(cst.parse_statement(self.statement.format(code)))
        returned = cst.Return(value=cst.Name(code)) if code == "step_output" else updated.body[0]
        lines.append(updated.with_changes(body=[returned], leading_lines=[]))
        lines[0] = lines[0].with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel(lines)


def call_before_returns(func: cst.FunctionDef, method: str) -> cst.FunctionDef:
    """``func`` with ``self.<method>(X)`` called before each of its own ``return X``, which then returns X: a 1.x
    step end that never returned a value, after which 1.x's loop kept the step's own output."""
    return func.visit(_BeforeEachReturn(f"self.{method}({{}})"))  # type: ignore[return-value]  # stays a FunctionDef


def _loss_keyed(func: cst.FunctionDef, param: str) -> bool:
    """Whether an epoch-end body reads ``x["loss"]`` from its outputs (1.x handed a tensor-returning
    training_step's outputs over as ``{"loss": tensor}``)."""
    found = False

    class Finder(cst.CSTVisitor):
        def visit_Subscript(self, node: cst.Subscript) -> None:
            nonlocal found
            for element in node.slice:
                if isinstance(element.slice, cst.Index) and literal(element.slice.value) == "loss":
                    found = True

    read_only_visit(func, Finder())
    return found


def _returns_dict(func: cst.FunctionDef) -> bool:
    """Whether every value the step returns is a dict literal, or a name it assigned one to."""
    dict_names = set()

    class Finder(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if isinstance(node.value, cst.Dict) or (
                isinstance(node.value, cst.Call) and dotted(node.value.func) == "dict"
            ):
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        dict_names.add(target.target.value)

    read_only_visit(func, Finder())
    values = [r.value for r in own_returns(func) if r.value is not None]
    return bool(values) and all(
        isinstance(v, cst.Dict) or (isinstance(v, cst.Name) and v.value in dict_names) for v in values
    )


def _ensure_init_attr(cls: cst.ClassDef, attr: str, empty: str = "[]") -> cst.ClassDef:
    """``self.ATTR = EMPTY`` at the end of ``__init__`` (an ``__init__`` that passes everything on, where there is
    none)."""
    methods = class_methods(cls)
    line = cst.parse_statement(f"self.{attr} = {empty}")
    init = methods.get("__init__")
    if init is None:
        new = cst.parse_statement(
            f"def __init__(self, *args, **kwargs):\n    super().__init__(*args, **kwargs)\n    self.{attr} = {empty}\n"
        )
        body = list(cls.body.body)
        index = next((i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef)), len(body))
        first = body[index] if index < len(body) else None
        lead = first.leading_lines if isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) else ()
        body.insert(index, new.with_changes(leading_lines=lead))
        if index < len(body) - 1:
            body[index + 1] = body[index + 1].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        return cls.with_changes(body=cls.body.with_changes(body=body))
    if f"self.{attr} = {empty}" in cst.Module(body=[init]).code:
        return cls
    init = as_block(init)  # def __init__(self): super().__init__()
    assert isinstance(init.body, cst.IndentedBlock)
    return replace_method(
        cls, "__init__", [init.with_changes(body=init.body.with_changes(body=[*init.body.body, line]))]
    )


@dataclass(frozen=True)
class HookShape:
    """How one 1.x epoch-end hook got its outputs, read from a class's family: the class, its bases and its
    subclasses in the same file (a base's ``training_epoch_end`` aggregates what a subclass's step returns)."""

    #: some hook of the family reads ``outputs[i]["loss"]``: a bare training loss is collected as ``{"loss": loss}``
    loss_keyed: bool
    #: the step's dataloader-index parameter: the outputs come per loader (1.x: a list per loader where there were
    #: several, one flat list where there was one); None where the step takes none
    loader_param: str | None
    #: a base of the class in the file has the hook, and its ``__init__`` makes the list
    inherited: bool = False
    #: no class of the family in the file has the step (it is inherited from another file): the outputs are
    #: collected per dataloader by an ``on_<stage>_batch_end`` hook the class gets (evaluation stages only)
    batch_end: bool = False


#: Where the number of a stage's dataloaders is, on a 2.x Trainer (one entry per loader).
_LOADER_COUNTS = {"validation_epoch_end": "num_val_batches", "test_epoch_end": "num_test_batches"}
#: The 2.x hooks that receive each evaluation step's output, by the 1.x epoch end that got the list of them.
_BATCH_ENDS = {"validation_epoch_end": "on_validation_batch_end", "test_epoch_end": "on_test_batch_end"}


def outputs_train_epoch_end(methods: dict[str, cst.FunctionDef]) -> cst.FunctionDef | None:
    """A module's ``on_train_epoch_end(self, outputs)`` that reads ``outputs``, in a class without
    ``training_epoch_end``: 1.3 and 1.4 handed such a hook (its parameter named ``outputs``, which they looked for by
    name) the list they handed ``training_epoch_end``, and collected it for the hook alone where there was no
    ``training_epoch_end``; 1.5 stopped. It converts as a ``training_epoch_end`` would (its outputs collected by the
    step). None for any other shape (a callback's takes the trainer first)."""
    hook = methods.get("on_train_epoch_end")
    if hook is None or "training_epoch_end" in methods or hook.decorators:
        return None
    if _param_names(hook) != ["self", "outputs"] or hook.params.star_arg is not cst.MaybeSentinel.DEFAULT:
        return None
    # A super() call in it would reach 2.x's on_train_epoch_end(self), which takes no outputs: not this shape.
    return hook if _uses_name(hook.body, "outputs") and not _uses_name(hook.body, "super") else None


def _loader_param(step: cst.FunctionDef, step_name: str) -> str | None:
    """The parameter 1.x passed the dataloader index in: ``dataloader_idx`` by name, or a validation/test step's
    fourth (``self, batch, batch_idx, idx``). 1.x never passed one to ``training_step`` (several training loaders were
    combined into one batch), so a training step's ``dataloader_idx=None`` parameter is only ever its default."""
    if step_name == "training_step":
        return None
    names = _param_names(step)
    if "dataloader_idx" in names:
        return "dataloader_idx"
    if step_name != "training_step" and len(names) == 4:
        return names[3]
    return None


def super_only_epoch_end(cls: cst.ClassDef, hook: cst.FunctionDef, old: str) -> bool:
    """Whether ``hook`` (``old``, a 1.x epoch end of ``cls``) only hands its outputs to ``super().<old>(outputs)``
    (besides a docstring, ``pass`` and comments) in a class whose one base is LightningModule itself: 1.x's
    LightningModule epoch ends did nothing, and 2.x's LightningModule has none (the call raises AttributeError), so
    the method does nothing and goes (rule epoch-end)."""
    if len(cls.bases) != 1 or (dotted(cls.bases[0].value) or "").rsplit(".", 1)[-1] != "LightningModule":
        return False
    params = _param_names(hook)
    if len(params) != 2 or hook.params.star_arg is not cst.MaybeSentinel.DEFAULT or hook.decorators:
        return False
    call = m.Call(
        func=m.Attribute(value=m.Call(func=m.Name("super"), args=[]), attr=m.Name(old)),
        args=[m.Arg(value=m.Name(params[1]), keyword=None, star="")],
    )
    body = hook.body.body if isinstance(hook.body, cst.IndentedBlock) else hook.body.body
    calls = 0
    for index, statement in enumerate(body):
        smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
        for small in smalls:
            if isinstance(small, cst.Pass):
                continue
            if (
                index == 0
                and isinstance(small, cst.Expr)
                and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
            ):
                continue  # the docstring
            if m.matches(small, m.Expr(call) | m.Return(call)):
                calls += 1
                continue
            return False
    return calls > 0


#: 1.x LightningModule hooks that 2.x removed and whose 1.x body was a docstring alone (core/hooks.py's
#: ``on_epoch_start``/``on_epoch_end``, core/lightning.py's epoch ends): a ``super()`` call that reached one did
#: nothing and gave None; in 2.x it raises AttributeError.
REMOVED_EMPTY_HOOKS = ("on_epoch_start", "on_epoch_end", "training_epoch_end", "validation_epoch_end", "test_epoch_end")


def _base_names(cls: cst.ClassDef) -> list[str]:
    return [(dotted(b.value) or "").rsplit(".", 1)[-1] for b in cls.bases if b.keyword is None]


def empty_super_hooks(classes: dict[str, cst.ClassDef], name: str) -> frozenset[str]:
    """The hooks of :data:`REMOVED_EMPTY_HOOKS` whose ``super()`` call from class ``name`` reaches 1.x's empty
    LightningModule hook: the class has one base, LightningModule itself or a class of ``classes`` (the file's, by
    name) that has one base in turn, up to LightningModule, and no class of the file on the way defines an epoch hook
    (:data:`_EPOCH_HOOK_NAMES`). Empty where any class on the way has another base (a mixin, a class of another
    file: the hook may be there) or keywords (a metaclass)."""
    seen: set[str] = set()
    cls = classes.get(name)
    while cls is not None and name not in seen:
        seen.add(name)
        bases = _base_names(cls)
        if len(bases) != 1 or len(cls.bases) != 1:
            return frozenset()
        if bases[0] == "LightningModule":
            return frozenset(REMOVED_EMPTY_HOOKS)
        name = bases[0]
        cls = classes.get(name)
        if cls is not None and _defined_names(cls) & _EPOCH_HOOK_NAMES:
            # Decision: a base of the file with an epoch hook of either version (or one an earlier run made of
            # them): what super() reaches is, or was, the user's code; the TODOs stay (and a second run agrees).
            return frozenset()
    return frozenset()


#: The names a base of the file must not define for a super() call to reach LightningModule's empty hook: the
#: removed hooks, the 2.x hooks the upgrade turns them into, and the helpers merge_loop_epoch_hook keeps them as.
_EPOCH_HOOK_NAMES = frozenset(
    {
        *REMOVED_EMPTY_HOOKS,
        *(f"on_{stage}_epoch_{when}" for stage in "train validation test".split() for when in ("start", "end")),
        "_on_epoch_start_1x",
        "_on_epoch_end_1x",
    }
)


def _defined_names(cls: cst.ClassDef) -> set[str]:
    """The names ``cls``'s body defines: its methods and the plain names it assigns (``on_test_epoch_end = ...``)."""
    names = set(class_methods(cls))
    for statement in cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    names |= {t.target.value for t in small.targets if isinstance(t.target, cst.Name)}
                elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    names.add(small.target.value)
    return names


def _empty_super_call(hook: str, params: set[str]) -> m.Call:
    """``super().<hook>()`` or ``super().<hook>(x)`` with ``x`` a parameter of the method (nothing evaluated that
    could have an effect of its own)."""
    named: m.MatchIfTrue[cst.BaseExpression] = m.MatchIfTrue(
        lambda node: isinstance(node, cst.Name) and node.value in params
    )
    args = m.ZeroOrMore(m.Arg(value=named, keyword=None, star=""))
    return m.Call(func=m.Attribute(value=m.Call(func=m.Name("super"), args=[]), attr=m.Name(hook)), args=[args])


class _DropEmptySuper(FunctionBodyTransformer):
    """In one method: ``super().HOOK(...)`` as a statement goes, ``return super().HOOK(...)`` becomes ``return``
    (the method's last statement: goes too); a line with comments above it becomes ``pass`` under them; a block
    left empty gets ``pass``."""

    def __init__(self, func: cst.FunctionDef, hook: str) -> None:
        super().__init__()
        params = {p.name.value for p in func.params.params} or {"self"}
        self.call = _empty_super_call(hook, params)
        body = func.body.body if isinstance(func.body, cst.IndentedBlock) else []
        self.last = body[-1] if body else None
        self.dropped = 0

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.RemovalSentinel:
        if len(updated.body) != 1:
            return updated
        small = updated.body[0]
        if m.matches(small, m.Return(self.call)) and original is not self.last:
            # Decision: 1.x's hook gave None, so the method returned None here: a bare return keeps the flow.
            self.dropped += 1
            return updated.with_changes(body=[cst.Return(value=None)])
        if not m.matches(small, m.Expr(self.call) | m.Return(self.call)):
            return updated
        self.dropped += 1
        if any(line.comment is not None for line in updated.leading_lines):
            return updated.with_changes(body=[cst.Pass()])
        return cst.RemovalSentinel.REMOVE

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        if updated.body:
            return updated
        return updated.with_changes(body=[cst.SimpleStatementLine(body=[cst.Pass()])])


def drop_empty_super_calls(cls: cst.ClassDef, empty: frozenset[str]) -> ClassResult:
    """``super().on_epoch_start()`` and the like (``empty``: :func:`empty_super_hooks`' hooks for this class) in the
    method of the same name: 1.x's LightningModule hook did nothing and gave None, and 2.x has none (the call raises
    AttributeError), so the call goes, ``return super().<hook>(...)`` becoming ``return`` (rule super-removed-hook).
    The rewrites that follow then see the method without it: an ``on_epoch_start`` merges beside the 2.x hooks, an
    epoch end's ``outputs`` passed on only to it is unused. A method with another use of the call (its value used,
    other arguments) is left whole: the TODOs stay."""
    result = ClassResult(cls)
    for hook in REMOVED_EMPTY_HOOKS:
        method = class_methods(result.node).get(hook)
        if hook not in empty or method is None or method.decorators:
            continue
        if hook in EPOCH_ENDS and super_only_epoch_end(result.node, method, hook):
            continue  # the epoch-end rule removes the whole method
        block = as_block(method)
        rewrite = _DropEmptySuper(block, hook)
        new = block.visit(rewrite)
        assert isinstance(new, cst.FunctionDef)
        if not rewrite.dropped or _super_calls(new, hook):
            continue  # Decision: another use of super().<hook> is left: the method stays as written (TODO later).
        result.node = replace_method(result.node, hook, [new])
        result.changes.append(
            (hook, "super-removed-hook", f"{hook}: super().{hook}(...) dropped (1.x's LightningModule one was empty)")
        )
    return result


def _super_calls(func: cst.FunctionDef, hook: str) -> int:
    found = 0

    class Finder(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            nonlocal found
            found += node.attr.value == hook and m.matches(node.value, m.Call(func=m.Name("super")))

    read_only_visit(func, Finder())
    return found


def epoch_end_plan(module: cst.Module, manual: frozenset[str] = frozenset()) -> dict[str, dict[str, HookShape]]:
    """Per class of the file, the 1.x epoch-end hooks that convert (:class:`HookShape` per hook name): those where the
    class's family has a hook that reads its outputs and a step that returns them. A class of the family that has
    only the step collects its outputs; one that has only the hook takes them from the list its relative fills.
    A name two classes share is not in the plan (which one a subclass means is not known).

    Args:
        module: the parsed file.
        manual: the classes manual_optimization.py converts (their steps run several optimizers).
    """
    classes: list[cst.ClassDef] = []

    class _Classes(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            classes.append(node)

    read_only_visit(module, _Classes())
    names = [c.name.value for c in classes]
    # Two classes of one name: which one a subclass means is not known; neither takes part.
    by_name = {c.name.value: c for c in classes if names.count(c.name.value) == 1}
    bases = {
        name: {(dotted(b.value) or "").rsplit(".", 1)[-1] for b in c.bases} & set(by_name)
        for name, c in by_name.items()
    }

    def ancestors(name: str) -> set[str]:
        found, todo = set(), list(bases.get(name, ()))
        while todo:
            base = todo.pop()
            if base not in found:
                found.add(base)
                todo.extend(bases.get(base, ()))
        return found

    up = {name: ancestors(name) for name in by_name}
    plan: dict[str, dict[str, HookShape]] = {}
    for name in by_name:
        family = {name} | up[name] | {other for other, above in up.items() if name in above}
        shapes: dict[str, HookShape] = {}
        for old, (step_name, _, _) in EPOCH_ENDS.items():
            hooks, steps, inherited, several = [], [], False, False
            for member in sorted(family):
                methods = class_methods(by_name[member])
                hook, step = methods.get(old), methods.get(step_name)
                if hook is None and old == "training_epoch_end":
                    hook = outputs_train_epoch_end(methods)  # 1.3/1.4's on_train_epoch_end(self, outputs)
                elif hook is not None and old in empty_super_hooks(by_name, member):
                    # its super().<old>(outputs) goes (drop_empty_super_calls): what is left may read nothing
                    hook = class_methods(drop_empty_super_calls(by_name[member], frozenset({old})).node)[old]
                reads = (
                    hook is not None
                    and len(_param_names(hook)) == 2
                    and _uses_name(hook.body, _param_names(hook)[1])
                    and not super_only_epoch_end(by_name[member], hook, old)  # removed: it reads nothing
                )
                if reads and hook is not None:
                    hooks.append(hook)
                    inherited = inherited or member in up[name]
                overrides = any(step_name in class_methods(by_name[a]) for a in up[member])
                quiet = step is not None and _hands_nothing(
                    step, None if reads else hook, overrides, member, up, family
                )
                if step is not None and not quiet:
                    steps.append(step)
                    # Decision: a training_step taking optimizer_idx runs several optimizers where it reads the index
                    # or manual_optimization.py converts its class; an unread one that stays automatic is dropped
                    # (hook-param), and 2.x runs it once per batch, as a second run of the tool then sees it.
                    several = several or (
                        step_name == "training_step"
                        and "optimizer_idx" in _param_names(step)
                        and (member in manual or _uses_name(step.body, "optimizer_idx"))
                    )
            # A step that returns no value (a base's ``raise NotImplementedError`` placeholder, a step kept empty)
            # hands nothing to the epoch end, whatever its subclasses in other files return: not one that shows
            # what is collected.
            value_steps = [s for s in steps if any(r.value is not None for r in own_returns(s))]
            if hooks and not value_steps and old in _BATCH_ENDS and not inherited:
                # Decision: the step is inherited from another file (not seen), or it returns nothing here (its
                # subclasses' steps, perhaps in other files, give the outputs): 2.x hands each evaluation step's
                # output to on_<stage>_batch_end, which collects them as 1.x did (a None output left out, a list
                # per dataloader where there are several), whatever the step. Not the training stage: there 1.x's
                # list depended on the optimizers (nested per optimizer, the loss normalised), which the file does
                # not show. A family with the batch-end hook already keeps the TODO.
                # A callback's or a DataModule's method of the name is the user's own (1.x called neither's).
                outside = {
                    (dotted(b.value) or "").rsplit(".", 1)[-1] for member in family for b in by_name[member].bases
                } - set(by_name)
                batch_end = _BATCH_ENDS[old]
                if not any(word in base for base in outside for word in ("Callback", "DataModule")) and not any(
                    batch_end in class_methods(by_name[member]) for member in family
                ):
                    shapes[old] = HookShape(False, "dataloader_idx", False, batch_end=True)
                continue
            # Decision: every step of the family must return something, and none may run several optimizers (their
            # outputs nest per optimizer; manual_optimization.py rewrites those steps): else the TODO stays.
            if (
                not hooks
                or not steps
                or any(not any(r.value is not None for r in own_returns(s)) for s in steps)
                or several
            ):
                continue
            loaders = {_loader_param(s, step_name) for s in steps}
            if len(loaders) > 1 and None not in loaders:
                continue  # steps naming the loader index differently: not one shape
            loader = next((p for p in loaders if p is not None), None)
            shapes[old] = HookShape(any(_loss_keyed(h, _param_names(h)[1]) for h in hooks), loader, inherited)
        plan[name] = shapes
    return plan


def _hands_nothing(
    step: cst.FunctionDef,
    own_unread: cst.FunctionDef | None,
    overrides: bool,
    member: str,
    up: dict[str, set[str]],
    family: set[str],
) -> bool:
    """Whether 1.x handed no epoch end that reads outputs anything from ``member``'s ``step``: the step always raises
    and overrides a base's step of the file (``overrides``: a subclass that disables the stage, so no output ever came
    of it), or ``member`` overrides the epoch end with one that reads nothing (``own_unread``) and no class of the
    family below it has one (so no reading hook ran on its instances). Such a step does not decide whether the
    family's outputs can be collected. A base's own ``raise NotImplementedError`` placeholder is not one: its
    subclasses in other files give the outputs (the batch-end collection, or the TODO)."""
    body = step.body.body if isinstance(step.body, cst.IndentedBlock) else []
    raises = any(isinstance(line, cst.SimpleStatementLine) and isinstance(line.body[0], cst.Raise) for line in body)
    if overrides and raises and not any(own_returns(step)):
        return True  # it raises before it could return (any return would be one above the raise)
    below = {other for other in family if member in up.get(other, set())}
    return own_unread is not None and not below


def batch_end_shape(
    module: cst.CSTNode, cls: cst.ClassDef, methods: dict[str, cst.FunctionDef], old: str
) -> HookShape | None:
    """The :class:`HookShape` that collects an evaluation epoch end's outputs in ``on_<stage>_batch_end`` (what
    2.x hands that hook: the step's output as the loop got it, after a step end LegacyStepEnds runs), for a class
    that has the epoch end ``old`` and its step itself and no relative in the file (no base and no subclass of the
    file's: their steps would collect elsewhere), nor the batch-end hook already. None otherwise (training: 1.x's
    list there depended on the optimizers)."""
    if old not in _BATCH_ENDS or old not in methods or _BATCH_ENDS[old] in methods:
        return None
    if EPOCH_ENDS[old][0] not in methods:
        return None
    names: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            names.add(node.name.value)

    read_only_visit(module, _Names())
    if set(_base_names(cls)) & names:
        return None
    for other in _classes_of(module):
        if other is not cls and cls.name.value in _base_names(other):
            return None
    return HookShape(False, "dataloader_idx", False, batch_end=True)


def _classes_of(module: cst.CSTNode) -> list[cst.ClassDef]:
    found: list[cst.ClassDef] = []

    class _Classes(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            found.append(node)

    read_only_visit(module, _Classes())
    return found


class _SuperEpochEnd(FunctionBodyTransformer):
    """``super().OLD(X)`` as a statement of a converted hook -> ``self.ATTR = X`` and ``super().NEW()``: the base's
    hook, converted alike, takes its outputs from the list again."""

    def __init__(self, old: str, new: str, attr: str) -> None:
        super().__init__()
        self.old, self.new, self.attr = old, new, attr
        self.left = 0  # calls of super().OLD in another shape (a value used, keywords): the TODO stays
        self.handed = 0  # calls rewritten

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1 or not m.matches(
            updated.body[0],
            m.Expr(
                m.Call(
                    func=m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(self.old)),
                    args=[m.Arg(keyword=None, star="")],
                )
            ),
        ):
            return updated
        statement = updated.body[0]
        assert isinstance(statement, cst.Expr)
        call = statement.value
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        code = cst.Module(body=[]).code_for_node(call.args[0].value)
        put_back = cst.parse_statement(f"self.{self.attr} = {code}").with_changes(leading_lines=updated.leading_lines)
        super_call = cst.Module(body=[]).code_for_node(call.func.value)
        self.handed += 1
        return cst.FlattenSentinel([put_back, cst.parse_statement(f"{super_call}.{self.new}()")])

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == self.old and m.matches(node.value, m.Call(func=m.Name("super"))):
            self.left += 1


def convert_epoch_ends(
    cls: cst.ClassDef, has_optimizer_idx: bool, family: dict[str, HookShape] | None = None
) -> ClassResult:
    """``training_epoch_end(self, outputs)`` and its twins -> ``on_*_epoch_end(self)``, with the step's outputs
    collected on the module, Lightning's own migration pattern: the step appends what it returns (detached, and a
    bare training loss as ``{"loss": loss}``, as 1.x handed it over) to ``self.<step>_outputs``; the epoch-end hook
    takes the list and leaves an empty one. Several dataloaders (a step with a loader index): the step collects per
    loader, and the hook gets 1.x's list per loader (one flat list where there is one loader). The step and the hook
    may be in different classes of one family (``family``: :func:`epoch_end_plan`); a hook's
    ``super().training_epoch_end(outputs)`` hands the outputs on to the base's converted hook. A TODO where no step
    of the family returns the outputs, or the step runs several optimizers.

    Args:
        cls: the class, already rewritten inside.
        has_optimizer_idx: its ``training_step`` uses ``optimizer_idx`` (several optimizers).
        family: what :func:`epoch_end_plan` found for this class; None: the class alone.
    """
    result = ClassResult(cls)
    if family is None:
        family = epoch_end_plan(cst.Module(body=[cls])).get(cls.name.value, {})
    for old, (step_name, new, attr) in EPOCH_ENDS.items():
        methods = class_methods(result.node)
        hook, step = methods.get(old), methods.get(step_name)
        shape = family.get(old)
        blocked = shape is None or (step_name == "training_step" and has_optimizer_idx)
        outputs_hook = outputs_train_epoch_end(methods) if old == "training_epoch_end" else None
        shown = old  # the method's name in the file, for the findings
        if hook is None and outputs_hook is not None and not blocked:
            # Decision: 1.3/1.4's on_train_epoch_end(self, outputs) got what training_epoch_end would have got, at the
            # same point (no training_epoch_end ran before it): it converts as that hook does. Blocked (several
            # optimizers, no step returning outputs): its hook-param TODO stays (convert_renamed_hooks).
            hook = outputs_hook.with_changes(name=cst.Name(old))
            result.node = replace_method(result.node, "on_train_epoch_end", [hook])
            methods = class_methods(result.node)
            shown = "on_train_epoch_end"
        if shape is not None and shape.batch_end:
            # a list of its own: an inherited step converted in its own file collects into self.<step>_outputs
            attr = attr.replace("_step_outputs", "_batch_outputs")
        empty = "{}" if shape is not None and shape.loader_param else "[]"
        if hook is not None and super_only_epoch_end(result.node, hook, old):
            # Decision: it only called LightningModule's own 1.x epoch end, which did nothing; 2.x has none to call.
            result.node = replace_method(result.node, old, [])
            result.changes.append(
                (old, "epoch-end", f"{old} removed: it only called LightningModule's, which 2.x lacks")
            )
            continue
        if hook is None:
            # A relative's hook reads what this step returns; a step that already writes self.<attr> (an earlier
            # run's collection, or the author's own 2.x one) collects already: a second append would double it.
            # (A step that only raises returns nothing to collect: _hands_nothing.)
            returns = step is not None and any(r.value is not None for r in own_returns(step))
            if step is not None and returns and not blocked and not _writes_attr(step, attr):
                assert shape is not None
                if shape.batch_end:
                    continue  # on_<stage>_batch_end collects the outputs, not the step
                result.node = _collect(result.node, step_name, attr, shape, _returns_dict(step))
                if not shape.inherited:
                    result.node = _ensure_init_attr(result.node, attr, empty)
                if step_name == "training_step":
                    result.imports.append(("utilities.memory", "recursive_detach"))
                result.changes.append(
                    (step_name, "epoch-end", f"{step_name} collects its outputs in self.{attr} for {new} of a relative")
                )
            continue
        # The name the converted hook takes: the 2.x hook's, or where the class has that one already (1.x ran the
        # epoch end first, then the on_*_epoch_end hook), a private one that the 2.x hook calls first.
        target, first_in = new, None
        if new in methods:
            target = _EPOCH_END_KEPT.format(old)
            if not _runs_first_possible(methods, new, target):
                result.todos.append((old, rules.todo_text("hook-conflict", hook=old, new=new)))
                continue
            first_in = new
        params = _param_names(hook)
        used = len(params) == 2 and _uses_name(hook.body, params[1])
        if _takes_no_outputs(hook):
            # Decision: 1.x (1.4 to 1.9) called an overridden epoch end with the outputs list, the training one as
            # soon as one batch ran, the evaluation ones always: ``(self)`` alone raised TypeError, so no 1.x run
            # reached its body. What the body does is what the author meant at the end of the epoch: the 2.x hook
            # (nothing collected, the body unchanged).
            renamed = hook.with_changes(name=cst.Name(target))
            result.node = replace_method(result.node, old, [renamed])
            result.changes.append(
                (old, "epoch-end", f"{old}(self) -> {new}(self) (1.x called it with outputs: a TypeError)")
            )
            if first_in is not None:
                result.node = _call_first(result.node, first_in, target)
            continue
        if len(params) != 2 or hook.params.star_arg is not cst.MaybeSentinel.DEFAULT:
            result.todos.append((old, rules.todo_text("epoch-end", hook=old, new=new)))
            continue
        if used:
            if blocked:
                # Several optimizers: 1.x's nesting of the outputs changed in 1.6 (epoch-end-optimizers says how).
                # (A second run sees the manual-optimization step the first wrote: the same TODO.)
                if step_name == "training_step" and (has_optimizer_idx or MANUAL_STEP in methods):
                    result.todos.append((old, rules.todo_text("epoch-end-optimizers", hook=old, new=new)))
                else:
                    result.todos.append((old, rules.todo_text("epoch-end", hook=old, new=new)))
                continue
            assert shape is not None
            hook = as_block(hook)
            rewrite = _SuperEpochEnd(old, new, attr)
            handed_on = hook.visit(rewrite)
            assert isinstance(handed_on, cst.FunctionDef)
            checker = _SuperEpochEnd(old, new, attr)
            handed_on.visit(checker)
            if checker.left or (shape.loader_param and rewrite.handed):
                # a super call this rewrite does not take, or one that would hand per-loader outputs back
                result.todos.append((old, rules.todo_text("epoch-end", hook=old, new=new)))
                continue
            hook = handed_on
            result.node = replace_method(result.node, old, [hook])
            if step is not None and not shape.batch_end:  # (batch_end: on_<stage>_batch_end collects them)
                result.node = _collect(result.node, step_name, attr, shape, _returns_dict(step))
                if step_name == "training_step":
                    result.imports.append(("utilities.memory", "recursive_detach"))
            if shape.loader_param:
                count = _LOADER_COUNTS[old]
                take = [
                    cst.parse_statement(
                        f"{params[1]} = [self.{attr}.get(i, []) for i in range(len(self.trainer.{count}))]"
                    ),
                    cst.parse_statement(f"self.{attr} = {{}}"),
                    cst.parse_statement(f"{params[1]} = {params[1]}[0] if len({params[1]}) == 1 else {params[1]}"),
                ]
            else:
                take = [cst.parse_statement(f"{params[1]}, self.{attr} = self.{attr}, []")]
            body = list(hook.body.body) if isinstance(hook.body, cst.IndentedBlock) else []
            docstring = (
                body[:1]
                if body
                and isinstance(body[0], cst.SimpleStatementLine)
                and isinstance(body[0].body[0], cst.Expr)
                and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
                else []
            )
            new_body = hook.body.with_changes(body=[*docstring, *take, *body[len(docstring) :]])
            result.node = _ensure_init_attr(result.node, attr, empty)
            if shape.batch_end:
                result.node = _with_batch_end(result.node, old, _BATCH_ENDS[old], attr)
            where = f"by {step_name}" if step is not None else f"by {step_name} of a relative"
            if shape.batch_end:
                where = f"by {_BATCH_ENDS[old]} (2.x hands it each step's output)"
            per_loader = ", per dataloader" if shape.loader_param else ""
            message = f"{shown}(outputs) -> {new}(self), the outputs collected in self.{attr}{per_loader} {where}"
        else:
            new_body = hook.body
            message = f"{old}(outputs) -> {new}(self) (outputs was unused)"
        methods = class_methods(result.node)
        hook = methods[old]
        renamed = hook.with_changes(
            name=cst.Name(target),
            params=hook.params.with_changes(
                params=[hook.params.params[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            ),
            body=new_body,
        )
        result.node = replace_method(result.node, old, [renamed])
        if first_in is not None:
            result.node = _call_first(result.node, first_in, target)
            message += f"; kept as {target}, which {first_in} calls first (1.x's order)"
        result.changes.append((shown, "epoch-end", message))
    return result


#: The name a converted epoch end keeps where the class has the 2.x hook already (``{}``: the 1.x hook's name).
_EPOCH_END_KEPT = "_{}_1x"


def _runs_first_possible(methods: dict[str, cst.FunctionDef], new: str, private: str) -> bool:
    """Whether the class's own 2.x hook ``new`` can call the converted epoch end, kept as ``private``, first: it is a
    module's hook (``self`` alone, undecorated: 2.x calls it with nothing) and the private name is free."""
    return private not in methods and _takes_no_outputs(methods[new])


def _call_first(cls: cst.ClassDef, hook: str, private: str) -> cst.ClassDef:
    """``cls`` with ``self.<private>()`` as the first statement of its method ``hook`` (below a docstring): 1.x ran
    the epoch end before the ``on_*_epoch_end`` hook, whatever either returned."""
    func = as_block(class_methods(cls)[hook])
    assert isinstance(func.body, cst.IndentedBlock)
    return replace_method(cls, hook, [func.with_changes(body=_insert_first(func.body, f"self.{private}()"))])


def _insert_first(block: cst.IndentedBlock, code: str) -> cst.IndentedBlock:
    """``block`` with the statement ``code`` first (below a docstring; in place of a lone ``pass``)."""
    body = list(block.body)
    statement = cst.parse_statement(code)
    docstring = int(
        bool(body)
        and isinstance(body[0], cst.SimpleStatementLine)
        and isinstance(body[0].body[0], cst.Expr)
        and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
    rest = body[docstring:]
    if len(rest) == 1 and m.matches(rest[0], m.SimpleStatementLine(body=[m.Pass()])):
        body = [*body[:docstring], statement.with_changes(leading_lines=rest[0].leading_lines)]  # type: ignore[attr-defined]
    else:
        body.insert(docstring, statement)
    return block.with_changes(body=body)


def _with_batch_end(cls: cst.ClassDef, old: str, batch_end: str, attr: str) -> cst.ClassDef:
    """``cls`` with ``on_<stage>_batch_end`` (right after the hook ``old`` became) collecting each step output into
    ``self.ATTR`` per dataloader, as 1.x's evaluation loop kept them for the epoch end (a None output left out), after
    the base's own hook."""
    method = cst.parse_statement(
        f"def {batch_end}(self, outputs, batch, batch_idx, dataloader_idx=0):\n"
        f"    super().{batch_end}(outputs, batch, batch_idx, dataloader_idx)\n"
        "    if outputs is not None:  # 1.x kept each step output but None for the epoch end\n"
        f"        self.{attr}.setdefault(dataloader_idx, []).append(outputs)\n"
    ).with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    body = list(cls.body.body)
    index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == old)
    body.insert(index + 1, method)
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _takes_no_outputs(hook: cst.FunctionDef) -> bool:
    """``def training_epoch_end(self):``: ``self`` alone, no ``*args``/``**kwargs``/keyword-only parameters and not
    a static or class method (decorated: not known)."""
    params = hook.params
    return (
        [p.name.value for p in params.params] == ["self"]
        and not params.posonly_params
        and not params.kwonly_params
        and isinstance(params.star_arg, cst.MaybeSentinel)
        and params.star_kwarg is None
        and not hook.decorators
    )


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _writes_attr(method: cst.FunctionDef, attr: str) -> bool:
    """Whether ``method`` names ``self.<attr>`` anywhere in its body."""
    return bool(m.findall(method.body, m.Attribute(value=m.Name("self"), attr=m.Name(attr))))


def _collect(cls: cst.ClassDef, step_name: str, attr: str, shape: HookShape, returns_dict: bool) -> cst.ClassDef:
    """The class with its step appending each value it returns to ``self.ATTR`` (per loader where the step takes
    one), as 1.x handed it to the epoch end: a training step's detached, a bare training loss as ``{"loss": ...}``
    where the hook reads that key."""
    step = as_block(class_methods(cls)[step_name])
    if step_name == "training_step":
        wrap = "{}" if returns_dict or not shape.loss_keyed else '{{"loss": {}}}'
        wrap = f"recursive_detach({wrap})"
    else:
        wrap = "{}"
    # Keyed by the loader index, and 0 where the step's default (dataloader_idx=None) stands: 1.x and 2.x pass the
    # index only where there are several loaders, and the epoch end reads keys 0, 1, ...
    target = f"{attr}.setdefault({shape.loader_param} or 0, [])" if shape.loader_param else attr
    new_step = step.visit(_BeforeEachReturn(f"self.{target}.append({wrap})"))
    return replace_method(cls, step_name, [new_step])  # type: ignore[list-item]


#: The methods whose returned dict Lightning 1.0 read ``"log"`` and ``"progress_bar"`` keys from.
_LOGGING_RETURNS = (
    "training_step",
    "validation_step",
    "test_step",
    "training_epoch_end",
    "validation_epoch_end",
    "test_epoch_end",
)


#: The calls that build a dict the way 1.x steps built the dict they returned (``OrderedDict({...})`` in the GAN
#: examples of the time, ``dict(loss=..., log=...)``).
_DICT_BUILDERS = frozenset({"dict", "OrderedDict", "collections.OrderedDict"})
_LOG_KEYS = ("log", "progress_bar")


def _dict_literal(value: cst.BaseExpression) -> cst.Dict | cst.Call | None:
    """Where a dict's literal entries are written: ``{...}`` itself, the ``{...}`` inside ``dict({...})`` /
    ``OrderedDict({...})``, or a ``dict(key=value)`` call's keywords (the call); None for anything else."""
    if isinstance(value, cst.Dict):
        return value
    if not isinstance(value, cst.Call) or dotted(value.func) not in _DICT_BUILDERS:
        return None
    positional = [a for a in value.args if a.keyword is None]
    if len(positional) == 1 and not positional[0].star and isinstance(positional[0].value, cst.Dict):
        return positional[0].value if len(value.args) == 1 else None
    if not positional and all(not a.star for a in value.args):
        return value  # dict(loss=loss, log=logs) (or no arguments at all)
    return None


def _log_entries(value: cst.BaseExpression) -> dict[str, cst.BaseExpression]:
    """The ``"log"``/``"progress_bar"`` entries of a dict built by ``value`` (none where it is not such a dict)."""
    entries = _dict_literal(value)
    if isinstance(entries, cst.Dict):
        return {
            literal(e.key): e.value
            for e in entries.elements
            if isinstance(e, cst.DictElement) and literal(e.key) in _LOG_KEYS
        }
    if isinstance(entries, cst.Call):
        return {
            a.keyword.value: a.value for a in entries.args if a.keyword is not None and a.keyword.value in _LOG_KEYS
        }
    return {}


def _without_log_entries(value: cst.BaseExpression) -> cst.BaseExpression:
    """``value`` (a dict :func:`_dict_literal` reads) without its ``"log"``/``"progress_bar"`` entries."""
    entries = _dict_literal(value)
    if isinstance(entries, cst.Dict):
        kept: list[cst.BaseDictElement] = [
            e for e in entries.elements if not (isinstance(e, cst.DictElement) and literal(e.key) in _LOG_KEYS)
        ]
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        if entries is value:
            return entries.with_changes(elements=kept)
        assert isinstance(value, cst.Call)
        return value.with_changes(args=[value.args[0].with_changes(value=entries.with_changes(elements=kept))])
    assert isinstance(entries, cst.Call)
    args = [a for a in entries.args if not (a.keyword is not None and a.keyword.value in _LOG_KEYS)]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return entries.with_changes(args=args)


def _literal_keys(value: cst.BaseExpression) -> set[str] | None:
    """The keys of a ``{...}`` literal whose keys are all string literals; None where they are not known."""
    if not isinstance(value, cst.Dict):
        return None
    keys = [literal(e.key) if isinstance(e, cst.DictElement) else ... for e in value.elements]
    return {k for k in keys if isinstance(k, str)} if all(isinstance(k, str) for k in keys) else None


def _log_lines(logs: cst.BaseExpression | None, bar: cst.BaseExpression | None) -> list[cst.BaseStatement]:
    """The ``self.log_dict`` calls for a returned dict's ``"log"`` (logs) and ``"progress_bar"`` (bar) entries.

    2.x raises where one hook logs a key twice with different arguments: one dict in both entries is logged once,
    with ``prog_bar=True`` (1.0 showed it and logged it); two dicts whose keys may overlap log the keys of ``bar``
    with ``prog_bar=True`` and the rest of ``logs`` without."""
    code = cst.Module(body=[]).code_for_node
    lines: list[cst.BaseStatement] = []
    if logs is not None and bar is not None and code(logs) == code(bar):
        return [cst.parse_statement(f"self.log_dict({code(bar)}, prog_bar=True)")]
    if logs is not None:
        bar_keys = _literal_keys(bar) if bar is not None else set()
        log_keys = _literal_keys(logs)
        overlap = bar_keys is None or log_keys is None or bool(bar_keys & log_keys)
        if bar is not None and overlap and isinstance(bar, (cst.Name, cst.Attribute)):
            # Keys in both: logged once, on the progress bar and to the logger (as 1.0 did them both).
            lines.append(
                cst.parse_statement(f"self.log_dict({{k: v for k, v in {code(logs)}.items() if k not in {code(bar)}}})")
            )
        else:
            lines.append(cst.parse_statement(f"self.log_dict({code(logs)})"))
    if bar is not None:
        lines.append(cst.parse_statement(f"self.log_dict({code(bar)}, prog_bar=True)"))
    return lines


class _LogReturns(FunctionBodyTransformer):
    """``return {"loss": loss, "log": logs, "progress_bar": bar}`` -> ``self.log_dict(logs)``,
    ``self.log_dict(bar, prog_bar=True)``, ``return {"loss": loss}`` (nested functions left alone)."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = False

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Return):
            return updated
        value = updated.body[0].value
        if isinstance(value, cst.Call) and _log_entries(value):
            # return dict(loss=loss, log=logs) / return OrderedDict({...}): the call stays, without the entries
            entries = _log_entries(value)
            lines = _log_lines(entries.get("log"), entries.get("progress_bar"))
            returned = updated.body[0].with_changes(value=_without_log_entries(value))
            lines.append(updated.with_changes(body=[returned], leading_lines=[]))
            lines[0] = lines[0].with_changes(leading_lines=updated.leading_lines)
            self.changed = True
            return cst.FlattenSentinel(lines)
        if not isinstance(value, cst.Dict):
            return updated
        keys = {literal(e.key): e for e in value.elements if isinstance(e, cst.DictElement)}
        if "log" not in keys and "progress_bar" not in keys:
            return updated
        lines = _log_lines(
            keys["log"].value if "log" in keys else None,
            keys["progress_bar"].value if "progress_bar" in keys else None,
        )
        rest = [
            e
            for e in value.elements
            if not (isinstance(e, cst.DictElement) and literal(e.key) in ("log", "progress_bar"))
        ]
        if rest:
            rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            lines.append(
                updated.with_changes(body=[updated.body[0].with_changes(value=value.with_changes(elements=rest))])
            )
        lines[0] = lines[0].with_changes(leading_lines=updated.leading_lines)
        if rest:
            lines[-1] = lines[-1].with_changes(leading_lines=[])
        self.changed = True
        return cst.FlattenSentinel(lines)


@dataclass
class _ReturnedName:
    """How one method builds a dict it returns through a local name (``output = OrderedDict({...}); return output``)."""

    #: the statements that put "log"/"progress_bar" entries in it: ``name = {...}`` and ``name["log"] = x``
    writes: list[cst.SimpleStatementLine] = field(default_factory=list)
    #: every use of the name is one this rule follows (built, given entries, read by key, returned)
    followed: bool = True


def _returned_names(func: cst.FunctionDef) -> dict[str, _ReturnedName]:
    """The local names ``func`` returns (``return output``) that hold a dict it builds with "log"/"progress_bar"
    entries, and whether each is followed: every occurrence of the name in ``func`` (nested functions included) is
    ``name = <dict>``, ``name["key"] = x``, a read ``name["key"]`` of another key, or ``return name``."""
    names = {r.value.value for r in own_returns(func) if isinstance(r.value, cst.Name)}
    found: dict[str, _ReturnedName] = {}
    for name in names - {"None", "self"}:
        accounted = 0
        shape = _ReturnedName()
        set_keys: list[str] = []

        class Followed(FunctionBodyVisitor):
            """The occurrences this rule follows, in ``func``'s own statements."""

            def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
                nonlocal accounted
                if len(node.body) != 1:
                    return
                small = node.body[0]
                if isinstance(small, cst.Return) and small.value is not None and m.matches(small.value, m.Name(name)):
                    accounted += 1
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    return
                target = small.targets[0].target
                if m.matches(target, m.Name(name)):
                    if _dict_literal(small.value) is None:
                        return  # name = something else: not a dict this rule can read
                    accounted += 1
                    if _log_entries(small.value):
                        shape.writes.append(node)
                elif isinstance(target, cst.Subscript) and m.matches(target.value, m.Name(name)):
                    key = _subscript_key(target)
                    if key in _LOG_KEYS:
                        accounted += 1
                        set_keys.append(key)
                        shape.writes.append(node)

            def visit_Subscript(self, node: cst.Subscript) -> None:
                nonlocal accounted
                if m.matches(node.value, m.Name(name)) and isinstance(_subscript_key(node), str):
                    # name["loss"] read, or name["loss"] = x: either way the dict stays a dict with that key
                    accounted += _subscript_key(node) not in _LOG_KEYS

        seen = name_uses(func.body, name)
        read_only_visit(func, Followed(func))
        if not shape.writes:
            continue
        # Decision: an occurrence not followed (the dict handed to a function, updated, aliased, read in a nested
        # function), or both entries set by key (one dict in both would be logged twice): a TODO, not a guess.
        shape.followed = seen == accounted and len(set(set_keys)) < 2
        found[name] = shape
    return found


def _subscript_key(node: cst.Subscript) -> object:
    """The literal key of ``x["key"]``; ``...`` for anything else."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return ...
    return literal(node.slice[0].slice.value)


class _LogNames(FunctionBodyTransformer):
    """The statements :func:`_returned_names` found: ``name = {..., "log": x}`` -> ``self.log_dict(x)`` and
    ``name = {...}`` without the entry; ``name["log"] = x`` -> ``self.log_dict(x)``."""

    def __init__(self, writes: set[int]) -> None:
        super().__init__()
        self.writes = writes

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if id(original) not in self.writes:
            return updated
        assign = updated.body[0]
        assert isinstance(assign, cst.Assign)
        target = assign.targets[0].target
        if isinstance(target, cst.Subscript):
            key = _subscript_key(target)
            lines = _log_lines(assign.value if key == "log" else None, assign.value if key != "log" else None)
        else:
            entries = _log_entries(assign.value)
            lines = _log_lines(entries.get("log"), entries.get("progress_bar"))
            lines.append(updated.with_changes(body=[assign.with_changes(value=_without_log_entries(assign.value))]))
            lines[-1] = lines[-1].with_changes(leading_lines=[])
        lines[0] = lines[0].with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel(lines)


def convert_log_returns(cls: cst.ClassDef) -> ClassResult:
    """Lightning 1.0 logged the ``"log"`` (and ``"progress_bar"``) entries of a step's or an epoch end's returned
    dict; 2.x ignores them. They become ``self.log_dict(...)`` calls before the return, or where the method builds the
    dict it returns through a local name (``output = OrderedDict({..., "log": logs}); return output``), where it puts
    them in; a name the rule cannot follow keeps a TODO."""
    result = ClassResult(cls)
    for name in _LOGGING_RETURNS:
        method = class_methods(result.node).get(name)
        if method is None:
            continue
        transformer = _LogReturns()
        new = as_block(method).visit(transformer)
        assert isinstance(new, cst.FunctionDef)
        changed = transformer.changed
        # The dict returned through a local name: followed where every use of the name is one the rule reads.
        shapes = _returned_names(new)
        writes = {id(s) for shape in shapes.values() if shape.followed for s in shape.writes}
        if writes:
            followed = new.visit(_LogNames(writes))
            assert isinstance(followed, cst.FunctionDef)
            new, changed = followed, True
        for local, shape in shapes.items():
            if not shape.followed:
                result.todos.append((name, rules.todo_text("log-returns-unfollowed", name=local)))
        if changed:
            result.node = replace_method(result.node, name, [new])
            result.changes.append(
                (name, "log-returns", f'{name}: returned "log"/"progress_bar" entries -> self.log_dict(...)')
            )
    return result


def _is_callback_hook(func: cst.FunctionDef) -> bool:
    """A callback's hook takes ``(self, trainer, pl_module, ...)``; a module's takes ``(self, ...)``."""
    names = _param_names(func)
    return len(names) >= 3 and names[1] == "trainer"


#: 1.x's hooks that ran in every loop's epochs, and the name each keeps where the class has their 2.x hooks already.
_LOOP_EPOCH_HOOKS = {"on_epoch_start": "_on_epoch_start_1x", "on_epoch_end": "_on_epoch_end_1x"}


def merge_loop_epoch_hook(cls: cst.ClassDef, old: str, targets: tuple[str, ...]) -> cst.ClassDef | None:
    """``on_epoch_start``/``on_epoch_end`` in a class that already has one of the hooks it becomes (the
    lightning-hydra-template's ``on_epoch_end`` beside ``training_epoch_end``, now ``on_train_epoch_end``).

    1.x ran ``on_epoch_start`` before each loop's own epoch-start hook, and ``on_epoch_end`` after each loop's own
    epoch-end hook (itself after ``training_epoch_end``/``validation_epoch_end``): the old hook keeps its body under
    :data:`_LOOP_EPOCH_HOOKS`' name, each 2.x hook the class has calls it first (start) or last (end), and each one it
    lacks is that method. None (a TODO) where this cannot be exact: the private name is taken, a hook's parameters
    differ from the old one's, an end hook can return before its last line, or the old hook calls ``super()``'s (2.x's
    LightningModule has none).
    """
    methods = class_methods(cls)
    private = _LOOP_EPOCH_HOOKS[old]
    hook = methods[old]
    params = _param_names(hook)
    if private in methods or hook.params.star_arg is not cst.MaybeSentinel.DEFAULT or _uses_name(hook.body, "super"):
        return None
    call = cst.parse_statement(f"self.{private}({', '.join(params[1:])})")
    merged: dict[str, cst.FunctionDef] = {}
    for target in targets:
        existing = methods.get(target)
        if existing is None:
            continue
        if not _same_leading_params(existing, params):
            return None  # a callback's hook under other parameter names: which value goes where is not known
        block = as_block(existing)
        if old == "on_epoch_end" and any(own_returns(existing)):
            # Decision: 1.x ran on_epoch_end after the hook however it returned; a bare return (or return None:
            # 1.x ignored an epoch hook's value) gets the call before it. Any other return (a value computed, a
            # return under a finally clause or on a one-line if) stays a TODO.
            with_calls = _call_before_bare_returns(block, call)
            if with_calls is None:
                return None
            block = with_calls
        assert isinstance(block.body, cst.IndentedBlock)
        body = list(block.body.body)
        if old == "on_epoch_end":
            if _ends_in_return(body):
                pass  # the call is before that return already
            elif len(body) == 1 and m.matches(body[0], m.SimpleStatementLine(body=[m.Pass()])):
                # ``pass`` alone (an epoch end kept empty): the call takes its place and its comments.
                body = [call.with_changes(leading_lines=body[0].leading_lines)]  # type: ignore[attr-defined]
            else:
                body.append(call)
        else:
            # 1.x ran on_epoch_start first: the call goes above the body (below a docstring).
            docstring = int(
                bool(body)
                and isinstance(body[0], cst.SimpleStatementLine)
                and isinstance(body[0].body[0], cst.Expr)
                and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
            )
            body.insert(docstring, call)
        merged[target] = block.with_changes(body=block.body.with_changes(body=body))
    kept = hook.with_changes(name=cst.Name(private))
    aliases = [
        cst.parse_statement(f"{target} = {private}  # 1.x's {old} ran in every loop's epochs")
        for target in targets
        if target not in merged
    ]
    cls = replace_method(cls, old, [kept, *aliases])
    for target, method in merged.items():
        cls = replace_method(cls, target, [method])
    return cls


def _same_leading_params(hook: cst.FunctionDef, params: list[str]) -> bool:
    """Whether ``hook`` takes ``params`` first, by those names, and only parameters with a default after them (a
    callback's ``on_train_epoch_end(self, trainer, pl_module, unused=None)``: 2.x passes the first ones, as 1.x did);
    no ``*args``, no extra parameter named ``outputs`` (1.3/1.4 filled that one: rule hook-param)."""
    names = _param_names(hook)
    extra = hook.params.params[len(params) :]
    return (
        names[: len(params)] == params
        and all(p.default is not None and p.name.value != "outputs" for p in extra)
        and hook.params.star_arg is cst.MaybeSentinel.DEFAULT
        and not hook.params.kwonly_params
        and hook.params.star_kwarg is None
    )


def _ends_in_return(body: list[cst.BaseStatement]) -> bool:
    last = body[-1] if body else None
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)


class _CallBeforeBareReturns(FunctionBodyTransformer):
    """``return`` / ``return None`` on a line of its own -> ``CALL`` then ``return``, in one function (counted)."""

    def __init__(self, call: cst.BaseStatement) -> None:
        super().__init__()
        self.call = call
        self.done = 0

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Return):
            return updated
        value = updated.body[0].value
        if value is not None and not m.matches(value, m.Name("None")):
            return updated
        self.done += 1
        call = self.call.with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel([call, updated.with_changes(leading_lines=[])])


def _call_before_bare_returns(func: cst.FunctionDef, call: cst.BaseStatement) -> cst.FunctionDef | None:
    """``func`` with ``call`` before each of its own ``return``/``return None``; None where a return is of another
    kind (a value, a one-line ``if x: return``), or where a ``finally`` clause would run after the call (1.x ran
    the old hook after it)."""
    returns = list(own_returns(func))
    finally_found = False

    class Finally(FunctionBodyVisitor):
        def visit_Try(self, node: cst.Try) -> None:
            nonlocal finally_found
            finally_found = finally_found or node.finalbody is not None

    read_only_visit(func, Finally(func))
    if finally_found:
        return None
    rewrite = _CallBeforeBareReturns(call)
    new = func.visit(rewrite)
    assert isinstance(new, cst.FunctionDef)
    return new if rewrite.done == len(returns) else None


#: Renamed hooks 1.x called with no argument on a module, and with (trainer, pl_module) on a callback.
_ARGUMENTLESS_HOOKS = frozenset(
    {"on_epoch_start", "on_epoch_end", "on_pretrain_routine_start", "on_pretrain_routine_end"}
)


def _not_the_hook(func: cst.FunctionDef, module_class: bool) -> bool:
    """Whether ``func`` needs arguments 1.x never passed to the argumentless hook it is named after: more than a
    callback's two, or any at all in a LightningModule."""
    params = func.params
    required = [p for p in params.params[1:] if p.default is None] + [
        p for p in params.kwonly_params if p.default is None
    ]
    return len(required) > 2 or (module_class and bool(required))


def convert_renamed_hooks(cls: cst.ClassDef, train_only: bool = False) -> ClassResult:
    """Hooks 2.0 renamed, on callbacks and modules: ``on_epoch_start`` -> ``on_train_epoch_start`` (with the
    validation and test hooks it also stood for as aliases, so the 1.x behaviour stays; none where ``train_only``:
    1.0-1.1 code, whose 1.x ran it in training epochs only, era.py), ``on_pretrain_routine_*`` ->
    ``on_fit_start``, ``on_batch_*`` -> ``on_train_batch_*``, ``on_keyboard_interrupt`` -> ``on_exception`` guarded
    by ``isinstance(exception, KeyboardInterrupt)``; ``dataloader_idx``/``outputs`` go from the hooks that lost them;
    ``on_init_*`` get a TODO (``get_progress_bar_dict``: progress_bar_hooks.py)."""
    result = ClassResult(cls)
    module_class = any((dotted(b.value) or "").endswith("LightningModule") for b in cls.bases)
    for old, (new, aliases) in rules.RENAMED_HOOKS.items():
        methods = class_methods(result.node)
        hook = methods.get(old)
        if hook is None:
            continue
        if train_only:
            # Decision: 1.0-1.1's training loop alone called on_epoch_start/on_epoch_end: the validation and test
            # epoch hooks do not stand for them there, and a class's own on_validation_epoch_end is no conflict.
            aliases = ()
        if old in _ARGUMENTLESS_HOOKS and _not_the_hook(hook, module_class):
            # on_epoch_end(self, outputs, phase) in a LightningModule: 1.x called the hook with nothing (a callback's
            # with trainer and pl_module), so it could not have called this one. The user's own method under the
            # hook's name (2.x-era code, which calls it itself), left as it is.
            continue
        if new in methods or any(a in methods for a in aliases):
            merged = merge_loop_epoch_hook(result.node, old, (new, *aliases)) if old in _LOOP_EPOCH_HOOKS else None
            if merged is None:
                result.todos.append((old, rules.todo_text("hook-conflict", hook=old, new=new)))
                continue
            result.node = merged
            by = " and ".join(filter(None, (new, ", ".join(aliases))))
            result.changes.append((old, "renamed-hook", f"{old} -> {_LOOP_EPOCH_HOOKS[old]}, run by {by}"))
            continue
        params = hook.params
        if old in ("on_batch_start", "on_batch_end"):
            extra = ["batch", "batch_idx"] if old == "on_batch_start" else ["outputs", "batch", "batch_idx"]
            if any(name in _param_names(hook) for name in extra):
                result.todos.append((old, rules.todo_text("hook-conflict", hook=old, new=new)))
                continue
            added = [cst.Param(cst.Name(name)) for name in extra]
            existing = list(params.params)
            existing[-1] = existing[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            params = params.with_changes(params=[*existing, *added])
        renamed = hook.with_changes(name=cst.Name(new), params=params)
        lines: list[cst.BaseStatement] = [renamed]
        for alias in aliases:
            lines.append(cst.parse_statement(f"{alias} = {new}  # 1.x's {old} ran in every loop's epochs"))
        result.node = replace_method(result.node, old, lines)
        also = f" (and {', '.join(aliases)})" if aliases else ""
        if train_only and old in _LOOP_EPOCH_HOOKS:
            also = " (training epochs only, as 1.0-1.1 ran it: the file names TrainResult/EvalResult)"
        result.changes.append((old, "renamed-hook", f"{old} -> {new}{also}"))
    methods = class_methods(result.node)
    interrupt = methods.get("on_keyboard_interrupt")
    if interrupt is not None:
        if "on_exception" in methods:
            result.todos.append(
                (
                    "on_keyboard_interrupt",
                    rules.todo_text("hook-conflict", hook="on_keyboard_interrupt", new="on_exception"),
                )
            )
        elif not interrupt.params.params or not isinstance(interrupt.params.star_arg, cst.MaybeSentinel):
            # (self, *args): no place for the exception parameter the guard reads.
            result.todos.append(("on_keyboard_interrupt", rules.todo_text("keyboard-interrupt")))
        else:
            interrupt = as_block(interrupt)
            guard = cst.If(
                test=cst.parse_expression("isinstance(exception, KeyboardInterrupt)"),
                body=interrupt.body,
            )
            existing = list(interrupt.params.params)
            existing[-1] = existing[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            renamed = interrupt.with_changes(
                name=cst.Name("on_exception"),
                params=interrupt.params.with_changes(params=[*existing, cst.Param(cst.Name("exception"))]),
                body=cst.IndentedBlock(body=[guard]),
            )
            result.node = replace_method(result.node, "on_keyboard_interrupt", [renamed])
            result.changes.append(
                (
                    "on_keyboard_interrupt",
                    "keyboard-interrupt",
                    "on_keyboard_interrupt -> on_exception (KeyboardInterrupt only)",
                )
            )
    methods = class_methods(result.node)
    for name, param in rules.HOOK_PARAM_DROPS.items():
        hook = methods.get(name)
        if hook is None or param not in _param_names(hook):
            continue
        if name == "on_train_epoch_end" and len(_param_names(hook)) not in (2, 4):
            continue
        if _uses_name(hook.body, param):
            result.todos.append((name, rules.todo_text("hook-param", hook=name, param=param)))
            continue
        kept = [p for p in hook.params.params if p.name.value != param]
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        result.node = replace_method(
            result.node, name, [hook.with_changes(params=hook.params.with_changes(params=kept))]
        )
        result.changes.append((name, "hook-param", f"{name}: dropped {param} (gone from the 2.x signature)"))
    methods = class_methods(result.node)
    for name in ("on_init_start", "on_init_end"):
        if (
            name in methods
            and _is_callback_hook(methods[name])
            or (name in methods and len(_param_names(methods[name])) == 2)
        ):
            # 1.x ran on_init_start first thing in Trainer(...), on_init_end last: no 2.x hook runs there.
            result.todos.append((name, rules.todo_text("init-hooks", hook=name)))
    return result


def with_comments(cls: cst.ClassDef, comments: list[tuple[str, str]]) -> cst.ClassDef:
    """Each ``(method, text)`` as a ``# text`` line above that method (once: a second run adds nothing)."""
    for method, text in comments:
        text = rules.one_line(text)  # a comment holds no line break
        body = list(cls.body.body)
        for index, statement in enumerate(body):
            if isinstance(statement, cst.FunctionDef) and statement.name.value == method:
                present = {line.comment.value for line in statement.leading_lines if line.comment is not None}
                if f"# {text}" not in present:
                    lines = [*statement.leading_lines, cst.EmptyLine(indent=True, comment=cst.Comment(f"# {text}"))]
                    body[index] = statement.with_changes(leading_lines=lines)
                break
        cls = cls.with_changes(body=cls.body.with_changes(body=body))
    return cls
