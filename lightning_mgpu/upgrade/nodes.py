"""Small helpers on libcst nodes that the transformer's rule families share: a literal string's value, a node's code,
a keyword argument spaced like another, and the commas of a rewritten call or dict.

No rule of its own: these only build and read nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import libcst as cst

from lightning_mgpu.upgrade.scopes import dotted as _dotted


def string(node: cst.BaseExpression) -> str | None:
    """The value of a plain string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def node_kind(node: cst.CSTNode) -> str:
    """What a node is, for a TODO: ``Trainer(...)`` for a call, ``def name`` / ``class Name``, else its libcst type."""
    if isinstance(node, cst.Call):
        return f"{(_dotted(node.func) or 'a call').rsplit('.', 1)[-1]}(...)"
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        return f"{'def' if isinstance(node, cst.FunctionDef) else 'class'} {node.name.value}"
    return type(node).__name__


def quoted(value: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{value}"')


def alias_of(alias: cst.ImportAlias) -> str | None:
    """The ``as`` name of an import (always a plain name in an import; libcst's type also allows tuples)."""
    return alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None


def kwarg(name: str, value: cst.BaseExpression, like: cst.Arg | None = None) -> cst.Arg:
    """A keyword argument, spaced like ``like`` (``x=1`` or ``x = 1``)."""
    equal = (
        like.equal
        if like is not None and like.keyword is not None
        else cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    )
    return cst.Arg(keyword=cst.Name(name), value=value, equal=equal)


def without_comment(comma: Any) -> Any:
    """``comma`` without a trailing comment (``x=1,  # why``), keeping its line break and indentation."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace) and after.first_line.comment is not None:
        return comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(newline=after.first_line.newline))
        )
    return comma


def keyword_arg(key: str, value: cst.BaseExpression, like: cst.Arg | None) -> cst.Arg:
    """``key=value`` as an argument: ``like`` itself where it already says that, else spaced and followed like it."""
    if like is not None and like.keyword is not None and like.keyword.value == key and like.value is value:
        return like
    return kwarg(key, value, like).with_changes(comma=like.comma if like is not None else cst.MaybeSentinel.DEFAULT)


def commas(args: list[cst.Arg], original: Sequence[cst.Arg]) -> list[cst.Arg]:
    """Every argument but the last gets a comma spaced like the call's own (one per line stays one per line); the
    last keeps the call's trailing comma, or its absence. A comma carrying a comment is used once: an argument
    split in two keeps its comment on the first."""
    last_comma = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
    separator = next(
        (without_comment(a.comma) for a in original[:-1] if isinstance(a.comma, cst.Comma)),
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


def dict_commas(
    elements: list[cst.BaseDictElement], original: Sequence[cst.BaseDictElement]
) -> list[cst.BaseDictElement]:
    """A dict's elements with commas spaced like the dict's own; the last keeps the dict's trailing comma or its
    absence."""
    separator = next(
        (without_comment(e.comma) for e in original[:-1] if isinstance(e.comma, cst.Comma)),
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
    )
    last = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
    return [e.with_changes(comma=last if i == len(elements) - 1 else separator) for i, e in enumerate(elements)]
