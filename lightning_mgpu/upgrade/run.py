"""``lightning-mgpu upgrade PATH... [--write]``: walk the files, print a unified diff (or write), and a summary.

Exit status 0 whenever the run itself worked, whether or not anything changed; a file that does not parse is
reported and left untouched, and the others are still converted. 2 for a path that does not exist.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)

#: Folders a walk never enters.
SKIPPED_DIRS = {".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".mypy_cache", "build", "dist"}


@dataclass
class RunReport:
    """What one run did, file by file."""

    changed: dict[Path, list] = field(default_factory=dict)  # path -> findings, for files whose source changed
    todos: dict[Path, list] = field(default_factory=dict)  # path -> TODO findings (changed or not)
    unparsable: dict[Path, str] = field(default_factory=dict)
    notes: dict[Path, list] = field(default_factory=dict)
    scanned: int = 0


def python_files(paths: Iterable[Path]) -> list[Path]:
    """The ``.py`` files named, and those under the folders named (sorted, skipping virtualenvs and VCS folders).

    Raises:
        FileNotFoundError: a path does not exist.
    """
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: pass .py files or folders that hold them")
        if path.is_file():
            found.append(path)
            continue
        before = len(found)
        for candidate in sorted(path.rglob("*.py")):
            if not SKIPPED_DIRS.intersection(candidate.relative_to(path).parts[:-1]):
                found.append(candidate)
        if len(found) == before:
            raise FileNotFoundError(f"{path} holds no .py file (virtualenvs and build folders are skipped)")
    return list(dict.fromkeys(found))


def upgrade_paths(paths: Iterable[Path], write: bool = False, out: TextIO | None = None) -> RunReport:
    """Upgrade every Python file under ``paths``; print the diff to ``out`` unless ``write``.

    Args:
        paths: files and folders.
        write: apply the changes in place instead of printing the diff.
        out: where the diff goes (default: standard output).

    Returns:
        The run's report (changes and TODOs with line numbers, and the files that did not parse).

    Raises:
        FileNotFoundError: a path does not exist (before any file is touched).

    Example::

        report = upgrade_paths([Path("train.py")], write=True)
    """
    import libcst as cst

    from lightning_mgpu.upgrade.transform import upgrade_source

    out = out or sys.stdout
    report = RunReport()
    for path in python_files(paths):
        report.scanned += 1
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            report.unparsable[path] = f"cannot be read ({err})"
            continue
        try:
            result = upgrade_source(source)
        except cst.ParserSyntaxError as err:
            report.unparsable[path] = f"does not parse ({_syntax_error(source, err)})"
            continue
        except Exception as err:  # noqa: BLE001  (one file the tool cannot handle must not stop the others)
            log.debug("upgrade failed on %s", path, exc_info=True)
            report.unparsable[path] = f"the tool failed on it ({type(err).__name__}: {err}; please report it)"
            continue
        if result.todos:
            report.todos[path] = result.todos
        if result.notes:
            report.notes[path] = result.notes
        if result.source == source:
            continue
        report.changed[path] = result.changes
        if write:
            _write_atomically(path, result.source)
        else:
            out.writelines(
                difflib.unified_diff(
                    source.splitlines(keepends=True), result.source.splitlines(keepends=True), f"a/{path}", f"b/{path}"
                )
            )
    return report


def _syntax_error(source: str, err: Exception) -> str:
    """Where and why a file does not parse, in Python's own words (libcst reports the token after the error)."""
    try:
        compile(source, "<upgrade>", "exec", dont_inherit=True)
    except SyntaxError as syntax:
        return f"line {syntax.lineno}: {syntax.msg}"
    return f"line {getattr(err, 'raw_line', '?')}: {getattr(err, 'message', err)}"


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` whole or not at all (a kill mid-write leaves the user's file as it was)."""
    tmp = path.with_name(f".{path.name}.lightning-mgpu-upgrade.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(path.stat().st_mode & 0o7777)
    tmp.replace(path)


def summary(report: RunReport, write: bool) -> str:
    """The run's summary: each change and each TODO with file:line, the files that did not parse, and a total."""
    entries: list[tuple[str, int, str]] = []
    for path, findings in report.changed.items():
        entries += [(str(path), f.line, f.message) for f in findings]
    for path, findings in report.todos.items():
        entries += [(str(path), f.line, f.message) for f in findings]
    for path, findings in report.notes.items():
        entries += [(str(path), f.line, f.message) for f in findings]
    lines = [f"{path}:{line}: {message}" for path, line, message in sorted(entries, key=lambda e: (e[0], e[1]))]
    for path, reason in report.unparsable.items():
        lines.append(f"{path}: skipped, {reason}; left untouched")
    verb = "changed" if write else "would change"
    lines.append(
        f"lightning-mgpu upgrade: {len(report.changed)} of {report.scanned} file(s) {verb}"
        f" ({sum(len(v) for v in report.changed.values())} rewrite(s)), {sum(len(v) for v in report.todos.values())}"
        f" TODO(s) left for a person, {len(report.unparsable)} file(s) skipped"
        + ("" if write or not report.changed else "; run again with --write to apply")
    )
    if report.todos or report.notes:
        lines.append("lightning-mgpu upgrade --explain RULE prints what a TODO(lightning-mgpu:RULE) asks, in full")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``upgrade`` subcommand's arguments."""
    parser.add_argument("paths", nargs="*", type=Path, help=".py files, or folders to walk")
    parser.add_argument(
        "--write", action="store_true", help="apply the changes in place (default: print a unified diff)"
    )
    parser.add_argument(
        "--explain", metavar="RULE", help="print the full text of a rule named in a TODO(lightning-mgpu:RULE) and exit"
    )


def explain(rule_id: str) -> str | None:
    """A rule's full text (None for an unknown rule)."""
    from lightning_mgpu.upgrade.rules import RULES

    rule = RULES.get(rule_id)
    return None if rule is None else f"TODO(lightning-mgpu:{rule.id}): {rule.todo}\n\n{rule.text}"


def main(args: argparse.Namespace) -> int:
    """``lightning-mgpu upgrade``: returns the exit status."""
    from lightning_mgpu.utilities.imports import require

    if args.explain is not None:
        from lightning_mgpu.upgrade.rules import RULES

        text = explain(args.explain)
        if text is None:
            print(  # noqa: T201  (the command's own output)
                f"lightning-mgpu upgrade: error: no rule {args.explain!r}; the rules: {', '.join(sorted(RULES))}",
                file=sys.stderr,
            )
            return 2
        print(text)  # noqa: T201  (the command's own output)
        return 0
    if not args.paths:
        print("lightning-mgpu upgrade: error: name .py files or folders (or --explain RULE)", file=sys.stderr)  # noqa: T201
        return 2
    require("libcst", "lightning-mgpu upgrade")
    try:
        report = upgrade_paths(args.paths, write=args.write)
    except FileNotFoundError as err:
        print(f"lightning-mgpu upgrade: error: {err}", file=sys.stderr)  # noqa: T201  (the command's own output)
        return 2
    print(summary(report, args.write), file=sys.stderr)  # noqa: T201  (the command's own output; the diff is stdout)
    return 0
