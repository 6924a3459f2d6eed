"""Which names hold a Lightning Trainer: the one answer the tool and the independent scan share.

A Trainer is known by where it came from, not only by its name: ``t = pl.Trainer(...)``, ``runner =
Trainer.from_argparse_args(args)``, ``self.pl_trainer = Trainer(**cfg)`` (read as ``self.pl_trainer`` in the same
class), ``def run(tr: pl.Trainer)``, ``tr = hydra.utils.instantiate(cfg.trainer)``; and, as before, by a name with
"trainer" in it (``trainer``, ``self.trainer``, ``pl_trainer``).

This module knows no syntax tree: each side walks its own (the tool's :mod:`~lightning_mgpu.upgrade.trainer_owners`
with libcst, the scan's :mod:`~lightning_mgpu.upgrade.leftover_trainers` with :mod:`ast`) and hands it dotted names,
source text and bindings; the decisions are made here once, so that the tool and the scan cannot drift apart:

- :func:`builds_trainer`: whether a call's result is a Trainer (from its callee and first positional argument);
- :func:`annotates_trainer`: whether an annotation says Trainer (``Trainer``, ``pl.Trainer``, ``Optional[Trainer]``,
  ``"pl.Trainer"``);
- :class:`TrainerScopes`: the bindings of each scope, resolved as Python resolves a name (a function's own binding
  hides the module's, a class body's names are not seen by its methods, ``global``/``nonlocal`` bind outside). A
  name holds a Trainer where at least one of its bindings is one and every other is None (``t = None`` before
  ``t = Trainer(...)``); any other binding (a parameter with no Trainer annotation, a loop variable, another call's
  result) makes it unknown, which counts as no Trainer: the rewrites and the scan's findings are only for Trainers.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

#: The class that 1.x and 2.x both call Trainer.
TRAINER = "Trainer"
#: The top-level packages a Lightning Trainer is imported from (a ``Trainer`` imported from anywhere else, such as
#: transformers', is another class).
LIGHTNING_PACKAGES = ("pytorch_lightning", "lightning")
#: Subscripts whose one non-None element is the annotated type: ``Optional[Trainer]``, ``Union[Trainer, None]``.
_WRAPPERS = frozenset({"Optional", "Union", "typing.Optional", "typing.Union"})

#: A binding's verdict: the value is a Trainer.
HOLDS_TRAINER = "trainer"
#: The value is None (``t = None`` before ``t = Trainer(...)``): neither for nor against.
HOLDS_NONE = "none"
#: The value is anything else, or unknown (a parameter with no Trainer annotation, a loop variable, ...).
HOLDS_OTHER = "other"


def named_like_trainer(name: str) -> bool:
    """Whether a name or an attribute's last name says trainer (``trainer``, ``pl_trainer``, ``self.trainer``).

    Args:
        name: the name (an attribute's last part).

    Returns:
        True where "trainer" is in it, in any case.
    """
    return "trainer" in name.lower()


#: Words of a dotted path that make it a configuration, not a Trainer: ``cfg.trainer``, ``config.trainer``,
#: ``trainer_opt``, ``self.hparams.trainer`` hold a Trainer's settings (``cfg.trainer.resume_from_checkpoint`` is a
#: setting of the script's own), not the object.
CONFIG_WORDS = frozenset(
    {"cfg", "cfgs", "conf", "config", "configs", "opt", "opts", "options", "args", "arg", "kwargs", "params", "hparams"}
    | {"hp", "hps", "settings", "hydra", "defaults", "omegaconf", "yaml", "json"}
)


def owner_named_like_trainer(path: str) -> bool:
    """Whether an attribute's owner is a trainer by its name: its last name says trainer (:func:`named_like_trainer`)
    and no word of the path says configuration (:data:`CONFIG_WORDS`: ``cfg.trainer``, ``trainer_opt``).

    Args:
        path: the owner's dotted path (``self.trainer``), or its last name where it is no dotted path.

    Returns:
        True for ``trainer``, ``self.trainer``, ``pl_module.trainer``, ``pl_trainer``; False for ``cfg.trainer``.
    """
    words = set(re.split(r"[._]", path.lower()))
    return named_like_trainer(path.rsplit(".", 1)[-1]) and not words & CONFIG_WORDS


def is_lightning_module(module: str) -> bool:
    """Whether an imported module is Lightning's (``pytorch_lightning``, ``lightning``, ``lightning.pytorch``, and
    what lies below them).

    Args:
        module: the dotted module name of an import (relative imports: with their dots, so never Lightning's).

    Returns:
        True for Lightning's packages.
    """
    return module.split(".", 1)[0] in LIGHTNING_PACKAGES


def is_trainer_class(
    dotted: str, subclasses: frozenset[str] | set[str] = frozenset(), foreign: frozenset[str] | set[str] = frozenset()
) -> bool:
    """Whether a dotted name is Lightning's Trainer class: ``Trainer``, ``pl.Trainer``, ``lightning.pytorch.Trainer``,
    or a Trainer subclass of this file (``subclasses``); not where its first name comes from an import of another
    package (``foreign``: ``from transformers import Trainer``).

    Args:
        dotted: the name as written (``pl.Trainer``).
        subclasses: the names of this file's classes that derive from the Trainer.
        foreign: the local names this file imports from packages that are not Lightning's.

    Returns:
        True for the Trainer class.
    """
    if not dotted or dotted.split(".", 1)[0] in foreign:
        return False
    return dotted.rsplit(".", 1)[-1] == TRAINER or dotted in subclasses


def builds_trainer(
    callee: str,
    first: str | None,
    subclasses: frozenset[str] | set[str] = frozenset(),
    foreign: frozenset[str] | set[str] = frozenset(),
) -> bool:
    """Whether a call's result is a Lightning Trainer.

    ``Trainer(...)`` / ``pl.Trainer(...)`` (:func:`is_trainer_class`), 1.x's ``Trainer.from_argparse_args(args)``,
    the bundle's ``from_argparse_args(Trainer, args)`` (what the tool writes for it), and hydra's
    ``instantiate(cfg.trainer)`` (a config node named like a trainer).

    Args:
        callee: the called dotted name (``pl.Trainer.from_argparse_args``); empty where it is no dotted name.
        first: the dotted name of the first positional argument, or None.
        subclasses: the names of this file's Trainer subclasses.
        foreign: the local names imported from packages that are not Lightning's.

    Returns:
        True where the call builds a Trainer.
    """
    if is_trainer_class(callee, subclasses, foreign):
        return True
    owner, _, method = callee.rpartition(".")
    if (method or callee) == "from_argparse_args":
        return is_trainer_class(owner, subclasses, foreign) or (
            first is not None and is_trainer_class(first, subclasses, foreign)
        )
    if (method or callee) == "instantiate":  # hydra.utils.instantiate(cfg.trainer): hydra's, imported from hydra
        return first is not None and named_like_trainer(first.rsplit(".", 1)[-1])
    return False


def _annotated_names(node: ast.expr) -> list[str] | None:
    """The dotted names an annotation may be (None, Optional and Union taken apart); None where it is no such form."""
    if isinstance(node, ast.Constant) and node.value is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _annotated_names(ast.parse(node.value.strip(), mode="eval").body)
        except SyntaxError:
            return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _annotated_names(node.left), _annotated_names(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Subscript):
        if ast_dotted(node.value) not in _WRAPPERS:
            return None
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        names: list[str] = []
        for element in elements:
            inner = _annotated_names(element)
            if inner is None:
                return None
            names += inner
        return names
    dotted = ast_dotted(node)
    return None if dotted is None else [dotted]


def ast_dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for an ``ast`` name or attribute chain, else None (the scan's twin of :func:`scopes.dotted`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = ast_dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def annotates_trainer(
    annotation: str,
    subclasses: frozenset[str] | set[str] = frozenset(),
    foreign: frozenset[str] | set[str] = frozenset(),
) -> bool:
    """Whether an annotation says the value is a Lightning Trainer: ``Trainer``, ``pl.Trainer``, ``"pl.Trainer"``,
    ``Optional[Trainer]``, ``Trainer | None`` (a union with anything else is not one).

    Args:
        annotation: the annotation's source text.
        subclasses: the names of this file's Trainer subclasses.
        foreign: the local names imported from packages that are not Lightning's.

    Returns:
        True where the one type it names (None aside) is the Trainer.
    """
    try:
        names = _annotated_names(ast.parse(annotation.strip(), mode="eval").body)
    except SyntaxError:
        return False
    return names is not None and len(names) == 1 and is_trainer_class(names[0], subclasses, foreign)


#: A binding's verdict: one of the HOLDS_* constants, or ``(scope, name)``: the same as that name's (``t2 = t``).
Verdict = str | tuple[object, str]


@dataclass
class TrainerScopes:
    """The bindings of one file's scopes, filled by a walk over its tree, then asked :meth:`holds_trainer`.

    Scopes are keys of the caller's choosing (its tree's nodes). Each is a module, a function (a lambda too) or a
    class; a class's attributes (``self.x = ...`` in its methods, ``x: Trainer`` in its body) are kept per class.
    """

    _parents: dict[object, object | None] = field(default_factory=dict)
    _kinds: dict[object, str] = field(default_factory=dict)
    _bindings: dict[tuple[object, str], list[Verdict]] = field(default_factory=dict)
    _attributes: dict[tuple[object, str], list[Verdict]] = field(default_factory=dict)
    _declared: dict[tuple[object, str], str] = field(default_factory=dict)

    def scope(self, key: object, parent: object | None, kind: str) -> None:
        """A new scope.

        Args:
            key: the scope's key.
            parent: the scope around it (None for the module).
            kind: ``"module"``, ``"function"`` or ``"class"``.
        """
        self._parents[key] = parent
        self._kinds[key] = kind

    def declare(self, key: object, name: str, how: str) -> None:
        """``global name`` / ``nonlocal name`` in the function ``key`` (``how``: ``"global"`` or ``"nonlocal"``)."""
        self._declared[(key, name)] = how

    def bind(self, key: object, name: str, verdict: Verdict) -> None:
        """``name`` is bound in scope ``key`` (an assignment, a parameter, a loop variable, an import, ...)."""
        owner = self._binding_scope(key, name)
        if owner is not None:
            self._bindings.setdefault((owner, name), []).append(verdict)

    def bind_attribute(self, cls: object, attribute: str, verdict: Verdict) -> None:
        """``self.attribute = ...`` in a method of the class ``cls`` (or ``attribute: T`` in its body)."""
        self._attributes.setdefault((cls, attribute), []).append(verdict)

    def holds_trainer(self, key: object, name: str) -> bool:
        """Whether ``name``, read in scope ``key``, holds a Lightning Trainer (see the module's docstring).

        Args:
            key: the scope the name is read in.
            name: the name.

        Returns:
            True where the binding Python would read is a Trainer's in every case.
        """
        return self._resolves(self._lookup(key, name), name, set())

    def attribute_holds_trainer(self, cls: object, attribute: str) -> bool:
        """Whether ``self.attribute``, read in a method of class ``cls``, holds a Trainer: as :meth:`holds_trainer`,
        over every ``self.attribute = ...`` of the class."""
        return self._agree(self._attributes.get((cls, attribute), []), set())

    # -- resolution ----------------------------------------------------------------------------------------------

    def _binding_scope(self, key: object, name: str) -> object | None:
        """The scope a binding of ``name`` in ``key`` lands in: the module for ``global``, the nearest enclosing
        function for ``nonlocal``, else ``key`` itself."""
        how = self._declared.get((key, name))
        if how == "global":
            return self._module(key)
        if how == "nonlocal":
            outer = self._parents.get(key)
            while outer is not None and (self._kinds.get(outer) != "function" or (outer, name) not in self._bindings):
                outer = self._parents.get(outer)
            return outer
        return key

    def _module(self, key: object) -> object:
        while self._parents.get(key) is not None:
            key = self._parents[key]
        return key

    def _lookup(self, key: object, name: str) -> object | None:
        """The scope whose binding of ``name`` a read in ``key`` sees, or None (a builtin, or bound nowhere here)."""
        declared = self._binding_scope(key, name)
        if declared is not key:
            return declared
        scope: object | None = key
        first = True
        while scope is not None:
            # A class body's names are seen in the class body only, not in the functions inside it.
            if (first or self._kinds.get(scope) != "class") and (scope, name) in self._bindings:
                return scope
            first = False
            scope = self._parents.get(scope)
        return None

    def _resolves(self, scope: object | None, name: str, seen: set[tuple[object, str]]) -> bool:
        if scope is None or (scope, name) in seen:
            return False
        seen.add((scope, name))
        return self._agree(self._bindings.get((scope, name), []), seen)

    def _agree(self, verdicts: list[Verdict], seen: set[tuple[object, str]]) -> bool:
        """At least one binding is a Trainer and every other is None."""
        trainer = False
        for verdict in verdicts:
            if isinstance(verdict, tuple):
                # t2 = t: what t holds where it is read (followed once; a cycle counts as no Trainer)
                verdict = HOLDS_TRAINER if self._resolves(self._lookup(*verdict), verdict[1], seen) else HOLDS_OTHER
            if verdict == HOLDS_OTHER:
                return False
            trainer = trainer or verdict == HOLDS_TRAINER
        return trainer
