"""1.x spellings that no other rewrite reaches, found on real code (issue 53): each is rewritten where its meaning is
certain, and otherwise gets a TODO at the spot, never left silent.

- a 1.x Trainer key still written into settings after the rewrites (``config["gpus"] = n``,
  ``{"checkpoint_callback": ...}``, ``dict(distributed_backend=...)``) on a dict or config the tool does not follow
  into a Trainer: rule ``trainer-key-unfollowed`` (a TODO: the settings may be translated at run time, or be the
  script's own);
- ``trainer.accelerator_connector`` (rule ``trainer-accelerator-connector``): private in 2.x, with other attributes;
- Lightning 1.0's ``TrainResult`` / ``EvalResult`` (rule ``result-object``);
- ``optimizer_idx`` in ``validation_step``/``test_step``/``predict_step`` (rule ``eval-step-optimizer-idx``): 1.x
  never passed it there, so a parameter with a literal default is dropped and its uses read the default.
"""

from __future__ import annotations

from typing import Any

import libcst as cst
import libcst.matchers as m

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.scopes import dotted, literal
from lightning_mgpu.upgrade.traverse import read_only_visit

#: Lightning 1.0's step results (removed in 1.1).
RESULT_CLASSES = frozenset({"TrainResult", "EvalResult"})


def _key(node: cst.BaseExpression) -> str | None:
    value = literal(node)
    return value if isinstance(value, str) and value in rules.LEGACY_SETTINGS_KEYS else None


class _LegacyKeys(cst.CSTVisitor):
    """:func:`legacy_keys`' walk (a class of its own: defining one per statement cost more than the walk)."""

    def __init__(self, statement: cst.CSTNode) -> None:
        super().__init__()
        self.statement = statement
        self.found: list[tuple[str, Any]] = []  # (key, its value as scopes.literal reads it: ... where no literal)

    def _target(self, target: cst.BaseExpression, value: Any) -> None:
        if isinstance(target, cst.Subscript) and len(target.slice) == 1:
            element = target.slice[0].slice
            key = _key(element.value) if isinstance(element, cst.Index) else None
            if key is not None:
                self.found.append((key, value))

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._target(target.target, literal(node.value))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target, ...)  # x["gpus"] += n: a value no literal gives

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target, ... if node.value is None else literal(node.value))

    def visit_DictElement(self, node: cst.DictElement) -> None:
        key = _key(node.key)
        if key is not None:
            self.found.append((key, literal(node.value)))

    def visit_Call(self, node: cst.Call) -> None:
        if dotted(node.func) == "dict":
            self.found.extend(
                (a.keyword.value, literal(a.value)) for a in node.args if a.keyword and a.keyword.value in _KEYS
            )

    # A nested function or class is a statement of its own: its lines get their own TODO.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.statement

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return node is self.statement


def legacy_keys(statement: cst.CSTNode) -> list[str]:
    """The 1.x Trainer keys a statement still writes: subscript assignments (``x["gpus"] = n``, also augmented or
    annotated), dict literal keys and ``dict(gpus=...)`` keywords, in the order they appear, each once.

    Args:
        statement: a statement, after the rewrites.
    """
    return list(dict.fromkeys(key for key, _ in legacy_items(statement)))


def legacy_items(statement: cst.CSTNode) -> list[tuple[str, Any]]:
    """:func:`legacy_keys` with the value each is given, as :func:`~lightning_mgpu.upgrade.scopes.literal` reads
    it (``...`` where it is no literal), in the order they appear (a key written twice: twice)."""
    finder = _LegacyKeys(statement)
    read_only_visit(statement, finder)
    return finder.found


_KEYS = rules.LEGACY_SETTINGS_KEYS


def is_accelerator_connector(node: cst.Attribute, of_trainer: bool) -> bool:
    """``trainer.accelerator_connector`` / ``self.trainer.accelerator_connector`` (``of_trainer``: whether the owner is
    a Trainer, as :mod:`~lightning_mgpu.upgrade.trainer_owners` reads it)."""
    return node.attr.value == "accelerator_connector" and of_trainer


def result_class(call: cst.Call) -> str | None:
    """``TrainResult`` / ``EvalResult`` where ``call`` builds one (``pl.TrainResult(...)`` or the bare name)."""
    name = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return name if name in RESULT_CLASSES else None


class _ReadDefault(cst.CSTTransformer):
    """Every read of ``name`` becomes ``default`` (keywords and attribute names are not reads)."""

    def __init__(self, name: str, default: cst.BaseExpression) -> None:
        super().__init__()
        self.name, self.default = name, default

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.default.deep_clone() if updated.value == self.name else updated

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Param(self, original: cst.Param, updated: cst.Param) -> cst.Param:
        return updated.with_changes(name=original.name)


def _assigned(body: cst.CSTNode, name: str) -> bool:
    """Whether ``body`` binds ``name`` (an assignment, a loop or ``with`` target, a nested parameter, ...)."""

    class Finder(cst.CSTVisitor):
        found = False

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                self.found = True

    class Targets(cst.CSTVisitor):
        found = False

        def _check(self, target: cst.CSTNode | None) -> None:
            if target is not None:
                finder = Finder()
                read_only_visit(target, finder)
                self.found |= finder.found

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            self._check(node.target)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self._check(node.target)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self._check(node.target)

        def visit_For(self, node: cst.For) -> None:
            self._check(node.target)

        def visit_WithItem(self, node: cst.WithItem) -> None:
            self._check(node.asname)

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            self._check(node.target)

        def visit_Param(self, node: cst.Param) -> None:
            self._check(node.name)

        def visit_Global(self, node: cst.Global) -> None:
            self.found |= any(n.name.value == name for n in node.names)

        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            self.found |= any(n.name.value == name for n in node.names)

    targets = Targets()
    read_only_visit(body, targets)
    return targets.found


def _calls_super(func: cst.FunctionDef) -> bool:
    """Whether the method calls its parent's hook (``super().validation_step(...)``), which may take the index."""

    class Finder(cst.CSTVisitor):
        found = False

        def visit_Call(self, node: cst.Call) -> None:
            if m.matches(node.func, m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name(func.name.value))):
                self.found = True

    finder = Finder()
    read_only_visit(func.body, finder)
    return finder.found


def drop_eval_optimizer_idx(func: cst.FunctionDef) -> cst.FunctionDef | None:
    """``validation_step(self, batch, batch_idx, optimizer_idx=0)`` -> ``validation_step(self, batch, batch_idx)``,
    each read of ``optimizer_idx`` in the body becoming ``0``: 1.x never passed it to an evaluation step.

    Returns:
        The rewritten method; None where the parameter has no literal default or the body binds the name (the
        ``eval-step-optimizer-idx`` TODO then).
    """
    params = list(func.params.params)
    index = next((i for i, p in enumerate(params) if p.name.value == "optimizer_idx"), None)
    if index is None:
        return func
    default = params[index].default
    if default is None or literal(default) is ... or _assigned(func.body, "optimizer_idx") or _calls_super(func):
        return None
    kept = params[:index] + params[index + 1 :]
    if kept and index == len(params) - 1:
        kept[-1] = kept[-1].with_changes(comma=params[index].comma)
    body = func.body.visit(_ReadDefault("optimizer_idx", default))
    assert isinstance(body, cst.BaseSuite)
    return func.with_changes(params=func.params.with_changes(params=kept), body=body)
