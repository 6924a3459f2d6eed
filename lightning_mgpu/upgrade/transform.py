"""The libcst transformer behind ``lightning-mgpu upgrade``: one source file in, the 2.x source and a list of what
changed and what needs a hand out. Comments and formatting survive (a concrete syntax tree, not an AST).

The rules are in :mod:`lightning_mgpu.upgrade.rules`. Each rewrite is idempotent: its input spelling is gone from its
output, and a TODO comment is added only where the same comment is not there yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from lightning_mgpu.upgrade import rules


@dataclass(frozen=True)
class Finding:
    """One change made, or one thing left for a person (``todo``), at a line of the original file."""

    line: int
    message: str
    todo: bool = False
    note: bool = False  # advice about code that keeps working (nothing to change)


@dataclass
class FileResult:
    """The upgraded source of one file and what happened to it."""

    source: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def changes(self) -> list[Finding]:
        return [f for f in self.findings if not f.todo and not f.note]

    @property
    def todos(self) -> list[Finding]:
        return [f for f in self.findings if f.todo]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.note]


# ---------------------------------------------------------------------------------------------------------------
# Small helpers on nodes


def _dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def _string(node: cst.BaseExpression) -> str | None:
    """The value of a plain string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value)
    return None


def _literal(node: cst.BaseExpression) -> str | int | bool | None:
    """A string, integer, True/False or None literal's value; ``...`` (Ellipsis) for anything else."""
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    text = _string(node)
    if text is not None:
        return text
    number = _int(node)
    return number if number is not None else ...  # type: ignore[return-value]


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _quoted(value: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{value}"')


def _kwarg(name: str, value: cst.BaseExpression, like: cst.Arg | None = None) -> cst.Arg:
    """A keyword argument, spaced like ``like`` (``x=1`` or ``x = 1``)."""
    equal = (
        like.equal
        if like is not None and like.keyword is not None
        else cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    )
    return cst.Arg(keyword=cst.Name(name), value=value, equal=equal)


def _without_comment(comma: Any) -> Any:
    """``comma`` without a trailing comment (``x=1,  # why``), keeping its line break and indentation."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace) and after.first_line.comment is not None:
        return comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(newline=after.first_line.newline))
        )
    return comma


def _todo_comment(text: str) -> str:
    return rules.TODO_PREFIX + text


# ---------------------------------------------------------------------------------------------------------------
# Trainer arguments


@dataclass
class _TrainerArgs:
    """A Trainer call's keyword arguments as ``(name, value, original Arg)``, rewritten in place."""

    items: list[tuple[str, cst.BaseExpression, cst.Arg | None]]
    changes: list[str] = field(default_factory=list)
    todos: list[str] = field(default_factory=list)

    def get(self, name: str) -> cst.BaseExpression | None:
        return next((value for key, value, _ in self.items if key == name), None)

    def has(self, name: str) -> bool:
        return any(key == name for key, _, _ in self.items)

    def remove(self, name: str) -> None:
        self.items = [item for item in self.items if item[0] != name]

    def replace(self, name: str, new: list[tuple[str, cst.BaseExpression]]) -> None:
        """Put ``new`` where ``name`` was (or at the end), each new key once."""
        index = next((i for i, item in enumerate(self.items) if item[0] == name), len(self.items))
        like = self.items[index][2] if index < len(self.items) else None
        self.items = [item for item in self.items if item[0] != name]
        for offset, (key, value) in enumerate(new):
            self.items.insert(index + offset, (key, value, like))

    def set(self, name: str, value: cst.BaseExpression, replacing: str) -> bool:
        """Set ``name`` in ``replacing``'s place and drop ``replacing``. A different value already set is a TODO, and
        then nothing changes."""
        existing = self.get(name)
        if existing is not None and _code(existing) != _code(value):
            self.todos.append(rules.TODO_CONFLICT.format(old=replacing, value=_code(value), new=name))
            return False
        if existing is not None:
            self.remove(replacing)
        else:
            self.replace(replacing, [(name, value)])
        return True


def rewrite_trainer_args(args: _TrainerArgs) -> _TrainerArgs:
    """Rewrite 1.x Trainer keyword arguments to 2.x (see docs/upgrade.md for the table)."""
    strategy: cst.BaseExpression | None = None
    strategy_from: str | None = None
    written = ""  # what the user wrote, for the summary
    accelerator: str | None = None
    # accelerator="ddp" / distributed_backend="dp" / plugins="ddp_sharded": strategy names in 1.x.
    for key in ("accelerator", "distributed_backend", "plugins"):
        value = args.get(key)
        if value is None:
            continue
        name = _string(value)
        if isinstance(value, cst.List) and len(value.elements) == 1:
            name = _string(value.elements[0].value)
            if name is None and isinstance(value.elements[0].value, cst.Call) and key == "plugins":
                # plugins=[DDPShardedPlugin()]: a training-type plugin instance is a strategy in 2.x.
                func = _dotted(value.elements[0].value.func) or ""
                if func.rsplit(".", 1)[-1] in rules.REMOVED_CLASSES or func.endswith(("Plugin", "Strategy")):
                    strategy, strategy_from, written = value.elements[0].value, key, _code(value)
                    continue
        if name in rules.STRATEGY_STRINGS:
            strategy, strategy_from, written = _quoted(rules.STRATEGY_STRINGS[name]), key, _code(value)
            if name == "ddp_cpu":
                accelerator = "cpu"
        elif key == "distributed_backend" and name is not None:
            args.todos.append(f"distributed_backend={name!r} is gone: pass strategy=... (docs/upgrade.md)")
    if strategy is not None and strategy_from is not None:
        if args.set("strategy", strategy, replacing=strategy_from):
            args.changes.append(f"{strategy_from}={written} -> strategy={_code(strategy)}")
    # gpus=N / num_processes=N -> accelerator + devices.
    gpus = args.get("gpus")
    if gpus is not None:
        if _literal(gpus) in (0, None, "0", "") and _literal(gpus) is not False:
            accelerator = accelerator or "cpu"
            args.remove("gpus")
            args.changes.append(f'gpus={_code(gpus)} -> accelerator="cpu"')
        else:
            accelerator = "gpu"
            if args.set("devices", gpus, replacing="gpus"):
                args.changes.append(f'gpus={_code(gpus)} -> accelerator="gpu", devices={_code(gpus)}')
        if args.has("num_processes"):
            args.remove("num_processes")  # 1.x ignored it when gpus was given
            args.changes.append("num_processes dropped (1.x ignored it beside gpus)")
    processes = args.get("num_processes")
    if processes is not None:
        accelerator = accelerator or "cpu"
        if args.set("devices", processes, replacing="num_processes"):
            args.changes.append(f'num_processes={_code(processes)} -> accelerator="cpu", devices={_code(processes)}')
    if accelerator is not None:
        current = _string(args.get("accelerator")) if args.get("accelerator") is not None else None
        if args.get("accelerator") is None or current in rules.STRATEGY_STRINGS:
            args.remove("accelerator")
            # Before devices, where a person would write it.
            position = next((i for i, item in enumerate(args.items) if item[0] == "devices"), len(args.items))
            args.items.insert(position, ("accelerator", _quoted(accelerator), None))
        elif current not in (accelerator, "auto"):
            args.todos.append(
                f"accelerator={_code(args.get('accelerator'))} and the 1.x device flags ({accelerator}) disagree: choose one"
            )  # type: ignore[arg-type]
    # precision=16 -> "16-mixed", "bf16" -> "bf16-mixed".
    precision = args.get("precision")
    if precision is not None:
        literal = _literal(precision)
        key = str(literal) if isinstance(literal, (int, str)) and not isinstance(literal, bool) else None
        if key in rules.PRECISION:
            args.replace("precision", [("precision", _quoted(rules.PRECISION[key]))])
            args.changes.append(f'precision={_code(precision)} -> precision="{rules.PRECISION[key]}"')
    backend = args.get("amp_backend")
    if backend is not None:
        args.remove("amp_backend")
        if _string(backend) == "native":
            args.changes.append('amp_backend="native" removed (native AMP is the only one in 2.x)')
        else:
            args.todos.append(rules.TODO_APEX)
    for old, new in rules.RENAMED_ARGS.items():
        value = args.get(old)
        if value is not None:
            args.replace(old, [(new, value)])
            args.changes.append(f"{old} -> {new}")
    checkpoint = args.get("checkpoint_callback")
    if checkpoint is not None:
        if isinstance(_literal(checkpoint), bool):
            args.replace("checkpoint_callback", [("enable_checkpointing", checkpoint)])
            args.changes.append(f"checkpoint_callback={_code(checkpoint)} -> enable_checkpointing={_code(checkpoint)}")
        else:
            args.todos.append(rules.TODO_CHECKPOINT_CALLBACK.format(value=_code(checkpoint)))
    summary = args.get("weights_summary")
    if summary is not None:
        literal = _literal(summary)
        if literal is None:
            args.replace("weights_summary", [("enable_model_summary", cst.Name("False"))])
            args.changes.append("weights_summary=None -> enable_model_summary=False")
        elif literal == "top":
            args.remove("weights_summary")
            args.changes.append('weights_summary="top" removed (the 2.x default)')
        else:
            args.todos.append(rules.TODO_WEIGHTS_SUMMARY.format(value=_code(summary)))
    for name, advice in rules.REMOVED_ARGS.items():
        if args.has(name):
            args.todos.append(advice)
    return args


# ---------------------------------------------------------------------------------------------------------------
# Hooks


def _uses(node: cst.CSTNode, name: str, hook: str) -> int:
    """Uses of ``name`` in ``node``, not counting it passed on to ``super().<hook>(...)``."""

    class Counter(cst.CSTVisitor):
        count = 0

        def visit_Call(self, call: cst.Call) -> bool | None:
            if m.matches(call.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(hook))):
                for arg in call.args:
                    if not (isinstance(arg.value, cst.Name) and arg.value.value == name):
                        arg.value.visit(self)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                self.count += 1

    counter = Counter()
    node.visit(counter)
    return counter.count


class _DropSuperArgs(cst.CSTTransformer):
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


def _reduce_only(func: cst.FunctionDef) -> bool:
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


# ---------------------------------------------------------------------------------------------------------------
# The resume_from_checkpoint pre-pass


class _ResumeFinder(cst.CSTVisitor):
    """Finds ``NAME = Trainer(..., resume_from_checkpoint=V)`` and ``NAME.fit(...)`` in the same scope (function or
    module), so that ``V`` can move to ``fit(ckpt_path=V)``."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes: list[dict[str, Any]] = [{"trainers": {}, "fits": []}]
        self.moved: dict[cst.Call, cst.BaseExpression] = {}  # fit call -> value
        self.resolved: set[cst.Call] = set()  # Trainer calls whose value moved to a fit

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append({"trainers": {}, "fits": []})

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._close(self.scopes.pop())

    def leave_Module(self, node: cst.Module) -> None:
        self._close(self.scopes.pop())

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and isinstance(node.value, cst.Call):
            if _is_trainer_call(node.value):
                value = next(
                    (a.value for a in node.value.args if a.keyword and a.keyword.value == "resume_from_checkpoint"),
                    None,
                )
                if value is not None:
                    self.scopes[-1]["trainers"][node.targets[0].target.value] = (node.value, value)

    def visit_Call(self, node: cst.Call) -> None:
        if (
            isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "fit"
            and isinstance(node.func.value, cst.Name)
        ):
            self.scopes[-1]["fits"].append((node.func.value.value, node))

    def _close(self, scope: dict[str, Any]) -> None:
        for name, (trainer_call, value) in scope["trainers"].items():
            fits = [call for target, call in scope["fits"] if target == name]
            if fits and all(not any(a.keyword and a.keyword.value == "ckpt_path" for a in call.args) for call in fits):
                for call in fits:
                    self.moved[call] = value
                self.resolved.add(trainer_call)


def _is_trainer_call(call: cst.Call) -> bool:
    name = _dotted(call.func) or ""
    return name == "Trainer" or name.endswith(".Trainer") or name.endswith("Trainer.from_argparse_args")


# ---------------------------------------------------------------------------------------------------------------
# The transformer


_STATEMENTS = (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With, cst.Try)


class UpgradeTransformer(cst.CSTTransformer):
    """Rewrites one module; :func:`upgrade_source` runs it."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, resume: _ResumeFinder) -> None:
        super().__init__()
        self.resume = resume
        self.findings: list[Finding] = []
        self._pending: list[list[str]] = []  # TODO texts for the statement being visited, innermost last
        self._class_depth = 0
        #: local name -> (bundle module, new name, extra call kwargs) for the removed classes imported in this file.
        self.renamed: dict[str, tuple[str, str, dict[str, str]]] = {}
        #: aliases of the Lightning namespaces: {"pl": "pytorch_lightning", "L": "lightning.pytorch"}.
        self.namespace_aliases: dict[str, str] = {}
        self.imports_to_add: dict[tuple[str, str, str | None], None] = {}  # (module, name, asname), in order
        self.fairscale_checkpoint_line: int | None = None
        self.needs_bundle_import = False  # a bundle strategy name is passed as a string: it must be registered

    # -- bookkeeping ---------------------------------------------------------------------------------------------

    def _line(self, node: cst.CSTNode) -> int:
        try:
            return self.get_metadata(PositionProvider, node).start.line
        except KeyError:
            return 0

    def _change(self, node: cst.CSTNode, message: str) -> None:
        self.findings.append(Finding(self._line(node), message))

    def _todo(self, node: cst.CSTNode, message: str) -> None:
        self.findings.append(Finding(self._line(node), message, todo=True))
        if self._pending:
            self._pending[-1].append(message)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _STATEMENTS):
            self._pending.append([])
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: Any) -> Any:
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, _STATEMENTS):
            todos = self._pending.pop()
            if todos and isinstance(result, _STATEMENTS):
                present = {line.comment.value for line in result.leading_lines if line.comment is not None}
                new_lines = [
                    cst.EmptyLine(indent=True, comment=cst.Comment(_todo_comment(t)))
                    for t in dict.fromkeys(todos)
                    if _todo_comment(t) not in present
                ]
                if new_lines:
                    result = result.with_changes(leading_lines=[*result.leading_lines, *new_lines])
        return result

    # -- imports -------------------------------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = _dotted(alias.name)
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
            if name in rules.BUNDLE_FOR_NAMESPACE:
                self.namespace_aliases[local or name] = name

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        module = _dotted(updated.module) if updated.module is not None else None
        if module is None or isinstance(updated.names, cst.ImportStar):
            return updated
        if module == "lightning" and any(
            a.name.value == "pytorch" for a in updated.names if isinstance(a.name, cst.Name)
        ):
            for a in updated.names:
                if isinstance(a.name, cst.Name) and a.name.value == "pytorch":
                    self.namespace_aliases[a.asname.name.value if a.asname else "pytorch"] = "lightning.pytorch"
        namespace = next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if module == ns or module.startswith(ns + ".")), None)
        if module == "fairscale.nn" or module.startswith("fairscale.nn.checkpoint"):
            if any(isinstance(a.name, cst.Name) and a.name.value == "checkpoint_wrapper" for a in updated.names):
                self.fairscale_checkpoint_line = self._line(original)
        if namespace is None:
            return updated
        below = module[len(namespace) + 1 :] if module != namespace else ""
        bundle = rules.BUNDLE_FOR_NAMESPACE[namespace]
        kept: list[cst.ImportAlias] = []
        for alias in updated.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else None
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            if name in rules.REMOVED_CLASSES and below in rules.REMOVED_CLASS_MODULES:
                new, extra = rules.REMOVED_CLASSES[name]
                self._add_import(bundle, new, local if not extra and local != new else None)
                if extra:
                    self.renamed[local] = (bundle, new, extra)
                self._change(
                    original,
                    f"from {module} import {name} -> from {bundle} import {new}"
                    + (f" as {local}" if not extra and local != new else ""),
                )
                continue
            moved = rules.MOVED_NAMES.get((below, name))
            if moved is not None:
                submodule, new = moved
                target = f"{bundle}.{submodule}"
                if new == name:
                    self._add_import(target, new, alias.asname.name.value if alias.asname else None)
                else:
                    self._add_import(target, new, None)
                    self.renamed[local] = (target, new, {})
                self._change(original, f"from {module} import {name} -> from {target} import {new}")
                continue
            kept.append(alias)
        if len(kept) == len(updated.names):
            return updated
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=kept)

    def _add_import(self, module: str, name: str, asname: str | None) -> None:
        self.imports_to_add[(module, name, asname)] = None

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        updated = self._import_bundle(original, updated)
        if not self.imports_to_add:
            return updated
        existing = {
            (_dotted(s.module), a.name.value, a.asname.name.value if a.asname else None)
            for stmt in updated.body
            if isinstance(stmt, cst.SimpleStatementLine)
            for s in stmt.body
            if isinstance(s, cst.ImportFrom) and s.module is not None and not isinstance(s.names, cst.ImportStar)
            for a in s.names
            if isinstance(a.name, cst.Name)
        }
        new_statements = []
        for module, name, asname in self.imports_to_add:
            if (module, name, asname) in existing:
                continue
            alias = cst.ImportAlias(name=cst.Name(name), asname=cst.AsName(name=cst.Name(asname)) if asname else None)
            new_statements.append(
                cst.SimpleStatementLine(body=[cst.ImportFrom(module=cst.parse_expression(module), names=[alias])])
            )  # type: ignore[arg-type]
        if not new_statements:
            return updated
        return self._insert_after_imports(updated, new_statements)

    def _import_bundle(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        """``import lightning_mgpu`` where a Trainer gets a bundle strategy by name and nothing imports the bundle: the
        names exist only once it is imported."""
        if not self.needs_bundle_import:
            return updated
        for statement in updated.body:
            for small in getattr(statement, "body", []) if isinstance(statement, cst.SimpleStatementLine) else []:
                if isinstance(small, cst.Import) and any(_dotted(a.name) == "lightning_mgpu" for a in small.names):
                    return updated
                if (
                    isinstance(small, cst.ImportFrom)
                    and small.module is not None
                    and (_dotted(small.module) or "").startswith("lightning_mgpu")
                ):
                    return updated  # importing any part of the package imports (and registers) the package
        if any(module.startswith("lightning_mgpu") for module, _, _ in self.imports_to_add):
            return updated
        self.findings.append(
            Finding(1, "import lightning_mgpu added: it registers the bundle's strategy names with Lightning")
        )
        line = cst.SimpleStatementLine(
            body=[cst.Import(names=[cst.ImportAlias(name=cst.Name("lightning_mgpu"))])],
            trailing_whitespace=cst.TrailingWhitespace(
                whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(rules.REGISTERS_COMMENT)
            ),
        )
        return self._insert_after_imports(updated, [line])

    @staticmethod
    def _insert_after_imports(module: cst.Module, statements: list[cst.SimpleStatementLine]) -> cst.Module:
        """Insert ``statements`` after the file's opening block of imports (after its docstring when it has none)."""
        body = list(module.body)
        last_import = -1
        for index, statement in enumerate(body):
            if isinstance(statement, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
            ):
                last_import = index
            elif last_import >= 0 and not (
                isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Expr)
            ):
                break
        if (
            last_import < 0
            and body
            and isinstance(body[0], cst.SimpleStatementLine)
            and isinstance(body[0].body[0], cst.Expr)
        ):
            last_import = 0  # the docstring
        body[last_import + 1 : last_import + 1] = statements
        return module.with_changes(body=body)

    # -- attribute chains: pl.loggers.NeptuneLogger, pl.strategies.DDPShardedStrategy --------------------------------

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        dotted = _dotted(updated)
        if dotted is None or "." not in dotted:
            return updated
        head, _, rest = dotted.partition(".")
        namespace = self.namespace_aliases.get(head)
        if namespace is None:
            return updated
        below, _, name = rest.rpartition(".")
        bundle = rules.BUNDLE_FOR_NAMESPACE[namespace]
        if name in rules.REMOVED_CLASSES and below in rules.REMOVED_CLASS_MODULES:
            new, extra = rules.REMOVED_CLASSES[name]
            self._add_import(bundle, new, None)
            if extra:
                self.renamed[f"{dotted}"] = (bundle, new, extra)
            self._change(original, f"{dotted} -> {new} (from {bundle})")
            return cst.Name(new) if not extra else updated
        moved = rules.MOVED_NAMES.get((below, name))
        if moved is not None:
            submodule, new = moved
            self._add_import(f"{bundle}.{submodule}", new, None)
            if new != name:
                self.renamed[dotted] = (f"{bundle}.{submodule}", new, {})
            self._change(original, f"{dotted} -> {new} (from {bundle}.{submodule})")
            return cst.Name(new)
        return updated

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        # References to a renamed import (isinstance(cb, GPUStatsMonitor)); calls that add arguments go through leave_Call.
        entry = self.renamed.get(updated.value)
        return cst.Name(entry[1]) if entry is not None and not entry[2] else updated

    # -- calls -----------------------------------------------------------------------------------------------------

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = _dotted(original.func) or ""
        if func in self.renamed:
            _, new, extra = self.renamed[func]
            args = list(updated.args)
            if new == "GPUUtilizationMonitor" and args:
                self._todo(original, rules.TODO_GPU_STATS.format(args=", ".join(_code(a).rstrip(", ") for a in args)))
                args = []
            for key, value in extra.items():
                if not any(a.keyword is not None and a.keyword.value == key for a in args):
                    if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                    args.append(_kwarg(key, cst.parse_expression(value)))
            self._change(
                original,
                f"{func}(...) -> {new}(...)"
                + (f" with {', '.join(f'{k}={v}' for k, v in extra.items())}" if extra else ""),
            )
            return updated.with_changes(func=cst.Name(new), args=args)
        if original in self.resume.moved:
            value = self.resume.moved[original]
            args = list(updated.args)
            if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(_kwarg("ckpt_path", value.deep_clone()))
            self._change(original, f"resume_from_checkpoint={_code(value)} -> {func}(ckpt_path=...)")
            return updated.with_changes(args=args)
        if _is_trainer_call(original):
            return self._trainer_call(original, updated)
        return updated

    def _trainer_call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        positional = [a for a in updated.args if a.keyword is None and not a.star]
        keywords = [a for a in updated.args if a.keyword is not None]
        stars = [a for a in updated.args if a.star]
        items = [(a.keyword.value, a.value, a) for a in keywords]  # type: ignore[union-attr]
        trainer = rewrite_trainer_args(_TrainerArgs(items))
        if any(key == "resume_from_checkpoint" for key, _, _ in trainer.items):
            value = trainer.get("resume_from_checkpoint")
            trainer.remove("resume_from_checkpoint")
            if original not in self.resume.resolved:
                trainer.todos.append(rules.TODO_RESUME.format(value=_code(value)))  # type: ignore[arg-type]
        # Literal dicts splatted into the call: Trainer(**{"gpus": 2}).
        new_stars = []
        for star in stars:
            if (
                star.star == "**"
                and isinstance(star.value, cst.Dict)
                and all(isinstance(e, cst.DictElement) and _string(e.key) is not None for e in star.value.elements)
            ):
                inner = rewrite_trainer_args(
                    _TrainerArgs([(_string(e.key), e.value, None) for e in star.value.elements])
                )  # type: ignore[union-attr,misc]
                if _string(inner.get("strategy") or cst.Name("None")) in rules.BUNDLE_STRATEGY_NAMES:
                    self.needs_bundle_import = True
                if inner.changes or inner.todos:
                    trainer.changes += inner.changes
                    trainer.todos += inner.todos
                    elements = [cst.DictElement(key=_quoted(k), value=v) for k, v, _ in inner.items]
                    star = star.with_changes(value=star.value.with_changes(elements=elements))
            new_stars.append(star)
        strategy = trainer.get("strategy")
        if strategy is not None and _string(strategy) in rules.BUNDLE_STRATEGY_NAMES:
            self.needs_bundle_import = True
        for change in trainer.changes:
            self._change(original, change)
        for todo in trainer.todos:
            self._todo(original, todo)
        if not trainer.changes and new_stars == stars and len(trainer.items) == len(items):
            return updated
        new_args = positional + [self._arg(key, value, like) for key, value, like in trainer.items] + new_stars
        return updated.with_changes(args=self._commas(new_args, updated.args))

    @staticmethod
    def _arg(key: str, value: cst.BaseExpression, like: cst.Arg | None) -> cst.Arg:
        if like is not None and like.keyword is not None and like.keyword.value == key and like.value is value:
            return like
        return _kwarg(key, value, like).with_changes(
            comma=like.comma if like is not None else cst.MaybeSentinel.DEFAULT
        )

    @staticmethod
    def _commas(args: list[cst.Arg], original: Sequence[cst.Arg]) -> list[cst.Arg]:
        """Every argument but the last gets a comma spaced like the call's own (one per line stays one per line); the
        last keeps the call's trailing comma, or its absence. A comma carrying a comment is used once: an argument
        split in two keeps its comment on the first."""
        last_comma = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
        separator = next(
            (_without_comment(a.comma) for a in original[:-1] if isinstance(a.comma, cst.Comma)),
            cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        )
        used: set[int] = set()
        fixed = []
        for index, arg in enumerate(args):
            if index == len(args) - 1:
                comma = last_comma
            elif isinstance(arg.comma, cst.Comma) and arg.comma is not last_comma and id(arg.comma) not in used:
                comma = arg.comma
            else:
                comma = separator
            used.add(id(comma))
            fixed.append(arg.with_changes(comma=comma))
        return fixed

    # -- LightningModule hooks -------------------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._class_depth += 1

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._class_depth -= 1
        return updated

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef | cst.RemovalSentinel:
        if self._class_depth == 0:
            return updated
        hook = updated.name.value
        if hook in rules.HOOK_DROPPED_PARAMS:
            return self._drop_params(original, updated, hook)
        if hook in rules.STEP_END_HOOKS:
            if _reduce_only(updated):
                self._change(
                    original,
                    f"{hook} removed: it only reduced the replicas' outputs, which lightning_mgpu's dp does exactly",
                )
                return cst.RemoveFromParent()
            self._todo(original, rules.TODO_STEP_END.format(hook=hook))
        if hook in rules.EPOCH_END_HOOKS:
            self._todo(original, rules.TODO_EPOCH_END.format(hook=hook, new=rules.EPOCH_END_HOOKS[hook]))
        return updated

    def _drop_params(self, original: cst.FunctionDef, updated: cst.FunctionDef, hook: str) -> cst.FunctionDef:
        names = {p.name.value for p in updated.params.params}
        dropped = set()
        for name in rules.HOOK_DROPPED_PARAMS[hook]:
            if name not in names:
                continue
            if _uses(updated.body, name, hook):
                if name == "optimizer_idx":
                    self._todo(original, rules.TODO_OPTIMIZER_IDX.format(hook=hook))
                continue
            dropped.add(name)
        if not dropped or (hook == "backward" and "optimizer_idx" not in names):
            return updated  # backward(self, loss, optimizer) without optimizer_idx may be a 2.x signature already
        params = [p for p in updated.params.params if p.name.value not in dropped]
        if params:
            params[-1] = params[-1].with_changes(comma=updated.params.params[-1].comma)
        body = updated.body.visit(_DropSuperArgs(hook, dropped))
        self._change(original, f"{hook}: dropped {', '.join(sorted(dropped))} (gone from the 2.x signature)")
        return updated.with_changes(params=updated.params.with_changes(params=params), body=body)


def upgrade_source(source: str) -> FileResult:
    """Upgrade one file's source.

    Args:
        source: Python source of a Lightning 1.x script or module.

    Returns:
        The upgraded source (identical when there was nothing to do) and its findings, with original line numbers.

    Raises:
        libcst.ParserSyntaxError: the source does not parse.

    Example::

        result = upgrade_source('trainer = Trainer(gpus=2, accelerator="dp")\\n')
        result.source  # 'trainer = Trainer(accelerator="gpu", devices=2, strategy="dp")\\n'
    """
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module)
    resume = _ResumeFinder()
    wrapper.module.visit(resume)
    transformer = UpgradeTransformer(resume)
    new = wrapper.visit(transformer)
    findings = sorted(transformer.findings, key=lambda f: (f.line, f.todo))
    if transformer.fairscale_checkpoint_line is not None:
        findings.append(Finding(transformer.fairscale_checkpoint_line, rules.NOTE_FAIRSCALE_CHECKPOINT, note=True))
    return FileResult(new.code, findings)
