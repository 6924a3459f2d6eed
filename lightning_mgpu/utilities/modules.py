"""Choosing submodules by class, qualified-name pattern or predicate: what ``ActivationCheckpointing`` checkpoints and
which blocks ``FSDP2Strategy`` shards on their own."""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

ModuleSpec = type[nn.Module] | str | Callable[..., bool]
"""A module class (``nn.TransformerEncoderLayer``), an fnmatch pattern over qualified names
(``"net.blocks.*"``), or a predicate ``fn(module)`` / ``fn(name, module)``."""


def as_spec_list(modules: ModuleSpec | Sequence[ModuleSpec]) -> list[ModuleSpec]:
    """``modules`` as a list: a single class, pattern or predicate (a common slip for a list of one) is accepted."""
    return [modules] if isinstance(modules, (str, type)) or callable(modules) else list(modules)


class ModuleMatcher:
    """One entry of ``modules``: a class, a name pattern or a predicate."""

    def __init__(self, kind: str, value: Any, label: str, arity: int = 1, owner: str = "") -> None:
        self.kind, self.value, self.label, self.arity, self.owner = kind, value, label, arity, owner

    @classmethod
    def parse(cls, spec: Any, owner: str) -> ModuleMatcher:
        """Parse one entry; ``owner`` names the API in error messages (e.g. ``"ActivationCheckpointing"``).

        Raises:
            TypeError: ``spec`` is neither a module class, a string nor a callable.
            ValueError: an empty pattern.
        """
        if isinstance(spec, type):
            if not issubclass(spec, nn.Module):
                raise TypeError(f"{owner}: {spec.__name__} is not an nn.Module subclass.")
            return cls("class", spec, spec.__qualname__, owner=owner)
        if isinstance(spec, str):
            if not spec.strip():
                raise ValueError(f"{owner}: an empty pattern matches nothing; use e.g. 'net.blocks.*'.")
            return cls("pattern", spec, repr(spec), owner=owner)
        if callable(spec):
            return cls("predicate", spec, getattr(spec, "__qualname__", repr(spec)), _arity(spec), owner=owner)
        raise TypeError(
            f"{owner}: cannot select modules with {spec!r} ({type(spec).__name__}). Pass a module"
            " class, a name pattern such as 'net.blocks.*', or a predicate fn(module) / fn(name, module)."
        )

    def matches(self, name: str, module: nn.Module) -> bool:
        if self.kind == "class":
            return isinstance(module, self.value)
        if self.kind == "pattern":
            return fnmatch.fnmatchcase(name, self.value)
        return bool(self.value(name, module) if self.arity == 2 else self.value(module))

    def no_match_message(self, root_name: str, named: list[tuple[str, nn.Module]]) -> str:
        if self.kind == "pattern":
            names = [n for n, _ in named]
            probe = self.value.replace("*", "").replace("?", "")
            close = difflib.get_close_matches(self.value, names, n=5, cutoff=0.5) or difflib.get_close_matches(
                probe, names, n=5, cutoff=0.3
            )
            hint = (
                f" Close names: {', '.join(map(repr, close))}." if close else f" Top-level names: {_top_level(names)}."
            )
            return (
                f"{self.owner}: pattern {self.value!r} matched no submodule of {root_name}.{hint}"
                " Patterns are fnmatch-style over qualified names from `model.named_modules()`, e.g. 'net.blocks.*'."
            )
        if self.kind == "class":
            present = sorted({type(m).__name__ for _, m in named})
            close = difflib.get_close_matches(self.value.__name__, present, n=5, cutoff=0.4)
            shown = ", ".join(close or present[:12])
            return (
                f"{self.owner}: no submodule of {root_name} is an instance of {self.value.__qualname__}."
                f" {'Close' if close else 'Present'} classes: {shown}."
            )
        return (
            f"{self.owner}: predicate {self.label} returned False for every submodule of {root_name}"
            f" (it was called with {'(name, module)' if self.arity == 2 else '(module)'})."
        )


def _arity(fn: Callable[..., Any]) -> int:
    """2 if ``fn`` accepts ``(name, module)``, else 1."""
    try:
        inspect.signature(fn).bind("name", None)
        return 2
    except TypeError:
        return 1
    except ValueError:  # builtins without a signature
        return 1


def _top_level(names: list[str]) -> str:
    tops = sorted({n.split(".")[0] for n in names})
    return ", ".join(map(repr, tops[:12])) + (" ..." if len(tops) > 12 else "")


def select_modules(root: nn.Module, specs: list[ModuleSpec], owner: str) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` pairs of ``root``'s submodules (not ``root``) that any of ``specs`` matches, in
    ``named_modules()`` order.

    Raises:
        TypeError: an entry is neither a module class, a string nor a callable.
        ValueError: an entry matches no submodule (the message lists close names or classes).
    """
    matchers = [ModuleMatcher.parse(spec, owner=owner) for spec in specs]
    named = [(name, m) for name, m in root.named_modules() if name]
    for matcher in matchers:
        if not any(matcher.matches(name, m) for name, m in named):
            raise ValueError(matcher.no_match_message(type(root).__name__, named))
    return [(name, m) for name, m in named if any(matcher.matches(name, m) for matcher in matchers)]
