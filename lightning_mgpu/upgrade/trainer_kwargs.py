"""A 1.x Trainer's keyword arguments as the Trainer-arguments family rewrites them (:class:`TrainerArgs`): the
``(name, value, original Arg)`` items, rewritten in place, with the changes, TODOs, notes and imports the rewrite
records for the caller to emit, and what the file says about each value.

Rule ids: trainer-conflict (a TODO :meth:`TrainerArgs.set` leaves where a different value is already set).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.nodes import code as _code
from lightning_mgpu.upgrade.scopes import LIST
from lightning_mgpu.upgrade.scopes import literal as _literal

#: What a value may hold, as far as the file tells: a set of literals, or None when it cannot be read.
Resolver = Callable[[cst.BaseExpression], "set[Any] | None"]


def _list_sum(node: cst.BaseExpression) -> bool:
    """Whether ``node`` is a sum of list displays and comprehensions (``[a] + [b for b in c]``): a list, extended by
    adding one more."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return all(isinstance(side, (cst.List, cst.ListComp)) or _list_sum(side) for side in (node.left, node.right))
    return False


def _no_resolver(node: cst.BaseExpression) -> set[Any] | None:
    literal = _literal(node)
    return None if literal is ... else {literal}


@dataclass
class TrainerArgs:
    """A Trainer call's keyword arguments as ``(name, value, original Arg)``, rewritten in place."""

    items: list[tuple[str, cst.BaseExpression, cst.Arg | None]]
    changes: list[tuple[str, str]] = field(default_factory=list)  # (rule, what changed)
    todos: list[str] = field(default_factory=list)  # comment texts, "TODO(lightning-mgpu:rule): ..."
    notes: list[str] = field(default_factory=list)  # comment texts, "NOTE(lightning-mgpu:rule): ..."
    resolve: Resolver = _no_resolver
    assigned: Callable[[cst.BaseExpression], list[cst.BaseExpression] | None] = lambda node: None
    strategy_var: Callable[[cst.BaseExpression], bool] = lambda node: False
    namespace: str = "pytorch_lightning"
    #: whether the file spells a name (an attribute, a keyword) anywhere: a rewrite that depends on nothing else
    #: reading a setting asks it (True, "it may", where nothing says).
    spells: Callable[[str], bool] = lambda name: True
    imports: list[tuple[str, str]] = field(default_factory=list)  # (module, name) the rewrite needs
    #: keys an earlier run moved into the call's ``**legacy_trainer_kwargs(..., key=...)``: set there, not here.
    translated: frozenset[str] = frozenset()

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
            self.todo("trainer-conflict", old=replacing, value=_code(value), new=name)
            return False
        if existing is not None:
            self.remove(replacing)
        else:
            self.replace(replacing, [(name, value)])
        return True

    def change(self, rule: str, message: str) -> None:
        """A rewrite made, under ``rule`` (an id of :data:`rules.RULES`)."""
        self.changes.append((rule, message))

    def todo(self, rule: str, **values: Any) -> None:
        self.todos.append(rules.todo_text(rule, **values))

    def note(self, rule: str) -> None:
        self.notes.append(rules.note_text(rule))

    def add_callback(
        self,
        call: str,
        name: str,
        module: str,
        replacing: str,
        bundle: bool = False,
        when: cst.BaseExpression | None = None,
        unless_given: bool = False,
    ) -> bool:
        """Append ``call`` (a callback built from ``name``, imported from ``module`` below the namespace, or below
        the bundle's package for that namespace where ``bundle``) to ``callbacks=``, in ``replacing``'s place; False
        where ``callbacks=`` is something this tool cannot extend. ``when``: a condition read at run time, the
        callback then added as ``*([call] if when else [])``. ``unless_given``: where ``callbacks=`` is a list read
        at run time (a name), add ``*name.unless_given(that list)`` instead of ``call`` (the class's classmethod
        gives ``[]`` where the list holds such a callback already)."""
        existing = self.get("callbacks")
        added: cst.BaseExpression = cst.List([cst.Element(cst.parse_expression(call))])
        spread = (
            unless_given
            and existing is not None
            and not isinstance(existing, cst.List)
            and not _list_sum(existing)
            and "callbacks" not in self.translated
        )
        if spread:
            assert existing is not None
            added = cst.parse_expression(f"{name}.unless_given({_code(existing)})")
        element: cst.BaseElement = cst.Element(cst.parse_expression(call))
        if spread and when is None:
            element = cst.StarredElement(added)
        elif when is not None:
            element = cst.StarredElement(
                cst.IfExp(
                    test=when,
                    body=added,
                    orelse=cst.List([]),
                    lpar=[cst.LeftParen()],
                    rpar=[cst.RightParen()],
                )
            )
        if existing is None and "callbacks" in self.translated:
            # The call's callbacks are in its **legacy_trainer_kwargs(..., callbacks=...): a second callbacks=
            # would be a duplicate keyword; that list is for a person to extend (as on the run that moved it).
            return False
        if existing is None:
            self.replace(replacing, [("callbacks", cst.List([element]))])
        elif _list_sum(existing):
            # callbacks=[A] + [c for c in extra]: one more list added at the end.
            joined = cst.BinaryOperation(
                existing, cst.Add(whitespace_before=cst.SimpleWhitespace(" ")), cst.List([element])
            )
            self.replace("callbacks", [("callbacks", joined)])
            self.remove(replacing)
        elif isinstance(existing, cst.List):
            elements = list(existing.elements)
            if elements and elements[-1].comma is cst.MaybeSentinel.DEFAULT:
                elements[-1] = elements[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            self.replace("callbacks", [("callbacks", existing.with_changes(elements=[*elements, element]))])
            self.remove(replacing)
        elif self.resolve(existing) is not None and all(v == LIST for v in self.resolve(existing) or ()):
            starred = cst.StarredElement(existing, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            self.replace("callbacks", [("callbacks", cst.List([starred, element]))])
            self.remove(replacing)
        else:
            return False
        root = rules.BUNDLE_FOR_NAMESPACE[self.namespace] if bundle else self.namespace
        self.imports.append((f"{root}.{module}", name))
        return True
