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
from lightning_mgpu.upgrade.scopes import dotted, literal

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
    imports: list[tuple[str, str]] = field(default_factory=list)  # (module below the namespace, name)


def _methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
    return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}


def _replace_method(cls: cst.ClassDef, name: str, new: list[cst.BaseStatement]) -> cst.ClassDef:
    body = list(cls.body.body)
    index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == name)
    body[index : index + 1] = new
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _as_block(func: cst.FunctionDef) -> cst.FunctionDef:
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

    node.visit(Finder())
    return found


def _param_names(func: cst.FunctionDef) -> list[str]:
    return [p.name.value for p in func.params.params]


def _returns(func: cst.FunctionDef) -> Iterator[cst.Return]:
    """The return statements of ``func`` itself (not of functions or classes nested in it)."""
    found: list[cst.Return] = []

    class Finder(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is func

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

    func.visit(Finder())
    return iter(found)


class _OwnStatements(cst.CSTTransformer):
    """Visits the statements of the one function it is run on, not those of functions or classes nested in it."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.depth += 1
        return self.depth == 1

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.depth -= 1
        return updated

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


class _WrapReturns(_OwnStatements):
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


class _CollectReturns(_OwnStatements):
    """Before each ``return X`` of one function: ``self.ATTR.append(WRAP(X))`` (X evaluated once)."""

    def __init__(self, func: cst.FunctionDef, attr: str, wrap: str) -> None:
        super().__init__()
        self.func, self.attr, self.wrap = func, attr, wrap

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Return):
            return updated
        value = updated.body[0].value
        if value is None or literal(value) is None:
            return updated  # 1.x left a step that returned nothing out of the outputs
        code = cst.Module(body=[]).code_for_node(value)
        lines = []
        if not isinstance(value, cst.Name):
            lines.append(cst.parse_statement(f"step_output = {code}"))
            code = "step_output"
        lines.append(cst.parse_statement(f"self.{self.attr}.append({self.wrap.format(code)})"))
        returned = cst.Return(value=cst.Name(code)) if code == "step_output" else updated.body[0]
        lines.append(updated.with_changes(body=[returned], leading_lines=[]))
        lines[0] = lines[0].with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel(lines)


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

    func.visit(Finder())
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

    func.visit(Finder())
    values = [r.value for r in _returns(func) if r.value is not None]
    return bool(values) and all(
        isinstance(v, cst.Dict) or (isinstance(v, cst.Name) and v.value in dict_names) for v in values
    )


def _ensure_init_attr(cls: cst.ClassDef, attr: str) -> cst.ClassDef:
    """``self.ATTR = []`` at the end of ``__init__`` (an ``__init__`` that passes everything on, where there is
    none)."""
    methods = _methods(cls)
    line = cst.parse_statement(f"self.{attr} = []")
    init = methods.get("__init__")
    if init is None:
        new = cst.parse_statement(
            f"def __init__(self, *args, **kwargs):\n    super().__init__(*args, **kwargs)\n    self.{attr} = []\n"
        )
        body = list(cls.body.body)
        index = next((i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef)), len(body))
        first = body[index] if index < len(body) else None
        lead = first.leading_lines if isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) else ()
        body.insert(index, new.with_changes(leading_lines=lead))
        if index < len(body) - 1:
            body[index + 1] = body[index + 1].with_changes(leading_lines=[cst.EmptyLine()])
        return cls.with_changes(body=cls.body.with_changes(body=body))
    if f"self.{attr} = []" in cst.Module(body=[init]).code:
        return cls
    init = _as_block(init)  # def __init__(self): super().__init__()
    assert isinstance(init.body, cst.IndentedBlock)
    return _replace_method(
        cls, "__init__", [init.with_changes(body=init.body.with_changes(body=[*init.body.body, line]))]
    )


def convert_epoch_ends(cls: cst.ClassDef, has_optimizer_idx: bool) -> ClassResult:
    """``training_epoch_end(self, outputs)`` and its twins -> ``on_*_epoch_end(self)``, with the step's outputs
    collected on the module, Lightning's own migration pattern: the step appends what it returns (detached, and a
    bare training loss as ``{"loss": loss}``, as 1.x handed it over) to ``self.<step>_outputs``; the epoch-end hook
    takes the list and leaves an empty one. A TODO where the step is not in the class, returns nothing, takes a
    ``dataloader_idx`` (several loaders) or runs several optimizers."""
    result = ClassResult(cls)
    for old, (step_name, new, attr) in EPOCH_ENDS.items():
        methods = _methods(result.node)
        hook = methods.get(old)
        if hook is None:
            continue
        if new in methods:
            result.todos.append((old, rules.todo_text("hook-conflict", hook=old, new=new)))
            continue
        params = _param_names(hook)
        step = methods.get(step_name)
        used = len(params) == 2 and _uses_name(hook.body, params[1])
        if len(params) != 2 or hook.params.star_arg is not cst.MaybeSentinel.DEFAULT:
            result.todos.append((old, rules.todo_text("epoch-end", hook=old, new=new)))
            continue
        if used:
            blocked = (
                step is None
                or "dataloader_idx" in _param_names(step)
                or (step_name == "training_step" and has_optimizer_idx)
                or not any(r.value is not None for r in _returns(step))
            )
            if blocked:
                result.todos.append((old, rules.todo_text("epoch-end", hook=old, new=new)))
                continue
            assert step is not None  # a missing step blocks
            step, hook = _as_block(step), _as_block(hook)
            result.node = _replace_method(result.node, old, [hook])
            if step_name == "training_step":
                wrap = "{}" if _returns_dict(step) or not _loss_keyed(hook, params[1]) else '{{"loss": {}}}'
                wrap = f"recursive_detach({wrap})"
                result.imports.append(("utilities.memory", "recursive_detach"))
            else:
                wrap = "{}"
            new_step = step.visit(_CollectReturns(step, attr, wrap))
            result.node = _replace_method(result.node, step_name, [new_step])  # type: ignore[list-item]
            take = cst.parse_statement(f"{params[1]}, self.{attr} = self.{attr}, []")
            body = list(hook.body.body) if isinstance(hook.body, cst.IndentedBlock) else []
            docstring = (
                body[:1]
                if body
                and isinstance(body[0], cst.SimpleStatementLine)
                and isinstance(body[0].body[0], cst.Expr)
                and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
                else []
            )
            new_body = hook.body.with_changes(body=[*docstring, take, *body[len(docstring) :]])
            result.node = _ensure_init_attr(result.node, attr)
            message = f"{old}(outputs) -> {new}(self), the outputs collected in self.{attr} by {step_name}"
        else:
            new_body = hook.body
            message = f"{old}(outputs) -> {new}(self) (outputs was unused)"
        methods = _methods(result.node)
        hook = methods[old]
        renamed = hook.with_changes(
            name=cst.Name(new),
            params=hook.params.with_changes(
                params=[hook.params.params[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            ),
            body=new_body,
        )
        result.node = _replace_method(result.node, old, [renamed])
        result.changes.append((old, "epoch-end", message))
    return result


#: The methods whose returned dict Lightning 1.0 read ``"log"`` and ``"progress_bar"`` keys from.
_LOGGING_RETURNS = (
    "training_step",
    "validation_step",
    "test_step",
    "training_epoch_end",
    "validation_epoch_end",
    "test_epoch_end",
)


class _LogReturns(_OwnStatements):
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
        if not isinstance(value, cst.Dict):
            return updated
        keys = {literal(e.key): e for e in value.elements if isinstance(e, cst.DictElement)}
        if "log" not in keys and "progress_bar" not in keys:
            return updated
        code = cst.Module(body=[]).code_for_node
        lines: list[cst.BaseStatement] = []
        if "log" in keys:
            lines.append(cst.parse_statement(f"self.log_dict({code(keys['log'].value)})"))
        if "progress_bar" in keys:
            lines.append(cst.parse_statement(f"self.log_dict({code(keys['progress_bar'].value)}, prog_bar=True)"))
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


def convert_log_returns(cls: cst.ClassDef) -> ClassResult:
    """Lightning 1.0 logged the ``"log"`` (and ``"progress_bar"``) entries of a step's or an epoch end's returned
    dict; 2.x ignores them. They become ``self.log_dict(...)`` calls before the return."""
    result = ClassResult(cls)
    for name in _LOGGING_RETURNS:
        method = _methods(result.node).get(name)
        if method is None:
            continue
        transformer = _LogReturns()
        new = _as_block(method).visit(transformer)
        if transformer.changed:
            result.node = _replace_method(result.node, name, [new])  # type: ignore[list-item]
            result.changes.append(
                (name, "log-returns", f'{name}: returned "log"/"progress_bar" entries -> self.log_dict(...)')
            )
    return result


def _is_callback_hook(func: cst.FunctionDef) -> bool:
    """A callback's hook takes ``(self, trainer, pl_module, ...)``; a module's takes ``(self, ...)``."""
    names = _param_names(func)
    return len(names) >= 3 and names[1] == "trainer"


def convert_renamed_hooks(cls: cst.ClassDef) -> ClassResult:
    """Hooks 2.0 renamed, on callbacks and modules: ``on_epoch_start`` -> ``on_train_epoch_start`` (with the
    validation and test hooks it also stood for as aliases, so the 1.x behaviour stays), ``on_pretrain_routine_*`` ->
    ``on_fit_start``, ``on_batch_*`` -> ``on_train_batch_*``, ``on_keyboard_interrupt`` -> ``on_exception`` guarded
    by ``isinstance(exception, KeyboardInterrupt)``; ``dataloader_idx``/``outputs`` go from the hooks that lost them;
    ``on_init_*`` and ``get_progress_bar_dict`` get a TODO."""
    result = ClassResult(cls)
    for old, (new, aliases) in rules.RENAMED_HOOKS.items():
        methods = _methods(result.node)
        hook = methods.get(old)
        if hook is None:
            continue
        if new in methods or any(a in methods for a in aliases):
            result.todos.append((old, rules.todo_text("hook-conflict", hook=old, new=new)))
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
        result.node = _replace_method(result.node, old, lines)
        also = f" (and {', '.join(aliases)})" if aliases else ""
        result.changes.append((old, "renamed-hook", f"{old} -> {new}{also}"))
    methods = _methods(result.node)
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
            interrupt = _as_block(interrupt)
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
            result.node = _replace_method(result.node, "on_keyboard_interrupt", [renamed])
            result.changes.append(
                (
                    "on_keyboard_interrupt",
                    "keyboard-interrupt",
                    "on_keyboard_interrupt -> on_exception (KeyboardInterrupt only)",
                )
            )
    methods = _methods(result.node)
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
        result.node = _replace_method(
            result.node, name, [hook.with_changes(params=hook.params.with_changes(params=kept))]
        )
        result.changes.append((name, "hook-param", f"{name}: dropped {param} (gone from the 2.x signature)"))
    methods = _methods(result.node)
    for name in ("on_init_start", "on_init_end"):
        if (
            name in methods
            and _is_callback_hook(methods[name])
            or (name in methods and len(_param_names(methods[name])) == 2)
        ):
            result.todos.append((name, rules.todo_text("init-hooks", hook=name)))
    if "get_progress_bar_dict" in methods:
        result.todos.append(("get_progress_bar_dict", rules.todo_text("progress-bar-dict")))
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
