"""Version-compatibility imports: a ``try:`` that imports from Lightning with an ``except ImportError:`` that imports
the same names from where an older Lightning kept them::

    try:
        from pytorch_lightning.strategies import DDPStrategy
    except ImportError:  # Lightning < 1.6
        from pytorch_lightning.plugins import DDPPlugin as DDPStrategy

Converted branch by branch, the two would both name 2.x's class, and the old branch's ``DDPStrategy = DDPPlugin``
would become ``DDPStrategy = DDPStrategy``: a self-assignment that makes the name a local of the function, unbound
where the ``try:`` took the other way. Under 2.x only the ``try:`` runs (its imports are converted to 2.x's), so the
statement becomes the ``try:`` body (and its ``else:``) and the fallback goes.

Rule id: import-fallback.
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.context import UpgradeContext
from lightning_mgpu.upgrade.scopes import dotted as _dotted

#: What a version-compatibility handler catches (alone or in a tuple).
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})


def _namespace(module: str | None) -> str | None:
    """The Lightning namespace ``module`` is in (``pytorch_lightning.plugins`` -> ``pytorch_lightning``), or None."""
    if not module:
        return None
    return next((ns for ns in rules.BUNDLE_FOR_NAMESPACE if module == ns or module.startswith(ns + ".")), None)


def _catches_import_error_only(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return False  # a bare except: also catches what the try's other statements raise
    types = [e.value for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) else [handler.type]
    return all(_dotted(t) in IMPORT_ERRORS for t in types)


def _bound_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {n for e in target.elements for n in _bound_names(e.value)}
    return set()


def _branch(block: cst.BaseSuite, try_body: bool) -> tuple[set[str], set[str]] | None:
    """The Lightning namespaces one branch imports from and the names it binds; None where the branch holds
    something a collapse cannot vouch for. The ``try:`` body may hold only imports and plain assignments without a
    call (whatever else it ran could raise an ImportError of its own, which the fallback caught); a handler's body
    is dropped, so anything goes there."""
    if not isinstance(block, cst.IndentedBlock):
        return None
    namespaces: set[str] = set()
    bound: set[str] = set()
    for statement in block.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            if try_body:
                return None
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom):
                if isinstance(small.names, cst.ImportStar) or small.relative:
                    return None
                namespace = _namespace(_dotted(small.module) if small.module is not None else None)
                if namespace is not None:
                    namespaces.add(namespace)
                elif try_body:
                    return None  # a third-party import may be what fails: the fallback is then needed
                for alias in small.names:
                    local = alias.asname.name if alias.asname is not None else alias.name
                    bound |= _bound_names(local) if isinstance(local, cst.Name) else set()
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    name = _dotted(alias.name) or ""
                    namespace = _namespace(name)
                    if namespace is not None:
                        namespaces.add(namespace)
                    elif try_body:
                        return None
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        bound.add(alias.asname.name.value)
                    else:
                        bound.add(name.split(".")[0])
            elif isinstance(small, cst.Assign):
                if try_body and any(isinstance(n, cst.Call) for n in _walk(small.value)):
                    return None
                for target in small.targets:
                    bound |= _bound_names(target.target)
            elif isinstance(small, cst.Pass) or (
                isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)
            ):
                continue
            elif try_body:
                return None
    return namespaces, bound


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found = [node]
    for child in node.children:
        found.extend(_walk(child))
    return found


def collapsible(node: cst.Try) -> bool:
    """Whether ``node`` is a version-compatibility import to collapse to its ``try:`` body: no ``finally:``, every
    handler catches ImportError (or ModuleNotFoundError) only and imports from the same Lightning namespace as the
    ``try:``, and binds every name the ``try:`` imports."""
    if node.finalbody is not None or not node.handlers:
        return False
    if not all(_catches_import_error_only(h) for h in node.handlers):
        return False
    body = _branch(node.body, try_body=True)
    if body is None or len(body[0]) != 1:
        # No Lightning import (an optional dependency, whose fallback is needed where Lightning is missing), or
        # two namespaces (lightning.pytorch and pytorch_lightning are both 2.x: which one is installed is the
        # question the try: asks).
        return False
    for handler in node.handlers:
        branch = _branch(handler.body, try_body=False)
        if branch is None or branch[0] != body[0]:
            return False  # a handler that imports no Lightning name is a fallback of another kind: it stays
        if not body[1] <= branch[1]:
            return False  # the branches do not bind the same names: not one thing under two paths
    return True


def visit_try(ctx: UpgradeContext, node: cst.Try) -> None:
    if collapsible(node):
        # Its handlers are not converted: they go (their imports would only add unused ones at the top).
        ctx.collapsed_handlers.update(id(h) for h in node.handlers)


def visit_except_handler(ctx: UpgradeContext, node: cst.ExceptHandler) -> bool:
    return id(node) not in ctx.collapsed_handlers


def leave_try(
    ctx: UpgradeContext, original: cst.Try, updated: cst.Try
) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
    if not original.handlers or id(original.handlers[0]) not in ctx.collapsed_handlers:
        return updated
    # collapsible() saw indented blocks of statements only (the else: is one too)
    statements: list[cst.BaseStatement] = [s for s in updated.body.body if isinstance(s, cst.BaseStatement)]
    if updated.orelse is not None:
        statements.extend(s for s in updated.orelse.body.body if isinstance(s, cst.BaseStatement))
    if not statements:
        return cst.RemoveFromParent()  # every import it held moved to the file's head
    # The try's own comments (and blank lines) stay above what was its body.
    first = statements[0]
    if isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        statements[0] = first.with_changes(leading_lines=[*updated.leading_lines, *first.leading_lines])
    ctx.change(original, "import-fallback", "try/except ImportError -> the try's imports (the 2.x ones)")
    return cst.FlattenSentinel(statements)
