"""What one file's upgrade gives back (:class:`Finding`, :class:`FileResult`) and the checks on a source around it:
the Lightning tree it imports (:func:`namespace_of`), why it does not parse (:func:`syntax_error`), and whether the
rewrite still compiles (:func:`check_compiles`, raising :class:`UpgradeError`).

No rule id of its own: a finding carries the rule of the change, TODO or note it records (``rules.rule_of``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from lightning_mgpu.upgrade import rules


@dataclass(frozen=True)
class Finding:
    """One change made, or one thing left for a person (``todo``), at a line of the original file."""

    line: int
    message: str
    todo: bool = False
    note: bool = False  # advice about code that keeps working (nothing to change)
    rule: str = ""  # the rule's id (a TODO's or a note's is read from its text when not given)
    cell: int | None = None  # in a notebook: the cell, counting every cell from 1

    def __post_init__(self) -> None:
        if not self.rule and (self.todo or self.note):
            object.__setattr__(self, "rule", rules.rule_of(self.message))


@dataclass
class FileResult:
    """The upgraded source of one file and what happened to it."""

    source: str
    findings: list[Finding] = field(default_factory=list)
    #: Names this file's imports renamed (``DDPPlugin`` -> ``DDPStrategy``): a notebook's later cells rename their uses.
    renamed: dict[str, tuple[str, str, dict[str, str]]] = field(default_factory=dict)

    @property
    def changes(self) -> list[Finding]:
        return [f for f in self.findings if not f.todo and not f.note]

    @property
    def todos(self) -> list[Finding]:
        return [f for f in self.findings if f.todo]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.note]


def namespace_of(code: str) -> str:
    """The Lightning tree some code imports (``pytorch_lightning`` for 1.x code that names neither)."""
    if "pytorch_lightning" in code:
        return "pytorch_lightning"
    if "lightning.pytorch" in code or "from lightning import pytorch" in code:
        return "lightning.pytorch"
    return "pytorch_lightning"


def syntax_error(source: str, err: Exception) -> str:
    """Where and why ``source`` does not parse, in Python's own words (libcst reports the token after the error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, "<upgrade>", "exec", dont_inherit=True)
        except SyntaxError as syntax:
            return f"line {syntax.lineno}: {syntax.msg}"
    return f"line {getattr(err, 'raw_line', '?')}: {getattr(err, 'message', err)}"


class UpgradeError(Exception):
    """The tool produced something it must not write (a bug of the tool, never of the file)."""


def check_compiles(before: str, after: str) -> None:
    """Raise :class:`UpgradeError` where ``after`` does not compile but ``before`` did.

    Raises:
        UpgradeError: the rewrite broke a file that compiled.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes and the like: the user's, and the same in both
        try:
            compile(after, "<upgraded>", "exec", dont_inherit=True)
        except SyntaxError as err:
            try:
                compile(before, "<original>", "exec", dont_inherit=True)
            except SyntaxError:
                return  # it did not compile before either (a newer Python's syntax, or code libcst alone accepts)
            raise UpgradeError(f"the rewrite does not compile (line {err.lineno}: {err.msg})") from err
