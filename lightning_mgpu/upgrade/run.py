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
        for candidate in sorted(path.rglob("*.py")):
            if not SKIPPED_DIRS.intersection(candidate.relative_to(path).parts[:-1]):
                found.append(candidate)
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
            report.unparsable[path] = f"does not parse (line {err.editor_line}: {err.message})"
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
        entries += [(str(path), f.line, f"TODO {f.message}") for f in findings]
    for path, findings in report.notes.items():
        entries += [(str(path), f.line, f"note: {f.message}") for f in findings]
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
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, help=".py files, or folders to walk")
    parser.add_argument(
        "--write", action="store_true", help="apply the changes in place (default: print a unified diff)"
    )


def main(args: argparse.Namespace) -> int:
    """``lightning-mgpu upgrade``: returns the exit status."""
    from lightning_mgpu.utilities.imports import require

    require("libcst", "lightning-mgpu upgrade")
    try:
        report = upgrade_paths(args.paths, write=args.write)
    except FileNotFoundError as err:
        print(f"lightning-mgpu upgrade: error: {err}", file=sys.stderr)  # noqa: T201  (the command's own output)
        return 2
    print(summary(report, args.write), file=sys.stderr)  # noqa: T201  (the command's own output; the diff is stdout)
    return 0
