"""A read-only traversal for the upgrade's pre-passes, about 4 times as fast as ``node.visit(visitor)``.

libcst's ``visit`` rebuilds every node it passes, with its validation, even for a ``CSTVisitor`` that changes nothing
(libcst's own comment: "TODO: provide traversal where children are not replaced"). The tool's pre-passes (the file's
facts, the class-count, manual-optimization, grad-norm, tuner and epoch-end plans) each walked the whole module that
way, and they were about 60 % of the tool's time (``benchmarks/bench_upgrade_real.py``). :func:`read_only_visit`
calls the same visitor methods (``on_visit``/``on_leave``, hence ``visit_<Node>``/``leave_<Node>``, a ``False`` from
``on_visit`` skipping the children) on the same nodes in lexical order, without rebuilding anything, and leaves out
whitespace, comments and punctuation, which no pre-pass reads. It can go if libcst gets a traversal that does not
replace children.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import libcst as cst

#: Nodes no pre-pass reads: whitespace, comments, brackets and separators.
TRIVIA: tuple[type[cst.CSTNode], ...] = (
    cst.SimpleWhitespace,
    cst.ParenthesizedWhitespace,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.EmptyLine,
    cst.Comment,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Comma,
    cst.Semicolon,
    cst.Colon,
    cst.Dot,
    cst.AssignEqual,
)

#: Where a node's fields are not in lexical order: decorators come first, a class's bases before its body.
_LEXICAL = {
    cst.FunctionDef: ("decorators", "name", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "bases", "keywords", "body"),
}


@cache
def _child_fields(kind: type[cst.CSTNode]) -> tuple[str, ...]:
    names = tuple(f.name for f in dataclasses.fields(kind))
    first = _LEXICAL.get(kind, ())
    return (*first, *(n for n in names if n not in first))


#: The last module walked, in pre-order: ``[node, index past its subtree]`` per node. Each file's six pre-passes walk
#: the same module; the order is computed once and replayed (about 5 times as fast as walking the fields again).
_last_module: tuple[cst.Module, list[list]] | None = None


def _preorder(node: cst.CSTNode, out: list[list]) -> list[list]:
    entry = [node, 0]
    out.append(entry)
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            if not isinstance(value, TRIVIA):
                _preorder(value, out)
        elif isinstance(value, (tuple, list)):
            for child in value:
                if isinstance(child, cst.CSTNode) and not isinstance(child, TRIVIA):
                    _preorder(child, out)
    entry[1] = len(out)
    return out


def _replay(order: list[list], visitor: cst.CSTVisitor) -> None:
    open_nodes: list[list] = []  # entries whose subtree is being visited
    i = 0
    while i < len(order):
        node, end = order[i]
        while open_nodes and open_nodes[-1][1] <= i:
            visitor.on_leave(open_nodes.pop()[0])
        if visitor.on_visit(node):
            open_nodes.append(order[i])
            i += 1
        else:
            visitor.on_leave(node)
            i = end
    while open_nodes:
        visitor.on_leave(open_nodes.pop()[0])


def read_only_visit(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Run ``visitor`` over ``node`` and everything below it, as ``node.visit(visitor)`` would, without rebuilding
    the tree (trivia left out: :data:`TRIVIA`)."""
    global _last_module
    if isinstance(node, cst.Module):
        if _last_module is None or _last_module[0] is not node:
            _last_module = (node, _preorder(node, []))
        _replay(_last_module[1], visitor)
        return
    _replay(_preorder(node, []), visitor)


class FunctionBodyVisitor(cst.CSTVisitor):
    """Reads the statements of one function, ``func``, not those of the functions, lambdas and classes nested in it
    (whose names and returns are their own). Run it on ``func`` itself (``read_only_visit(func, visitor)``)."""

    def __init__(self, func: cst.FunctionDef) -> None:
        super().__init__()
        self.func = func

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.func

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


class FunctionBodyTransformer(cst.CSTTransformer):
    """Rewrites the statements of the one function it is run on (``func.visit(transformer)``), not those of the
    functions and classes nested in it."""

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


_T = TypeVar("_T")


def once_per_module(read: Callable[[cst.CSTNode], _T]) -> Callable[[cst.CSTNode], _T]:
    """``read(module)``, a whole-file fact each class asks for, computed once per module (the last one read: a file
    is converted class after class; a walk per class cost about 5 % of the tool's time on real files)."""
    last: list[Any] = [None, None]

    @functools.wraps(read)
    def cached(module: cst.CSTNode) -> _T:
        if last[0] is not module:
            last[:] = [module, read(module)]
        return last[1]

    return cached
