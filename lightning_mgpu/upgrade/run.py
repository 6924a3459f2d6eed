"""``lightning-mgpu upgrade PATH... [--write]``: walk the files, print a unified diff (or write), and a summary.

Exit status 0 whenever the run itself worked, whether or not anything changed; a file that does not parse is
reported and left untouched, and the others are still converted. 2 for a path that does not exist. Notebooks
(``.ipynb``) go to :mod:`~lightning_mgpu.upgrade.notebook`, cell by cell.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

log = logging.getLogger(__name__)

#: Folders a walk never enters.
SKIPPED_DIRS = {
    ".git",
    ".hg",
    ".venv",
    "venv",
    "__pycache__",
    "node_modules",
    ".tox",
    ".mypy_cache",
    "build",
    "dist",
    ".ipynb_checkpoints",  # Jupyter's autosaved copies of the notebooks beside them
}


@dataclass
class RunReport:
    """What one run did, file by file."""

    changed: dict[Path, list] = field(default_factory=dict)  # path -> findings, for files whose source changed
    todos: dict[Path, list] = field(default_factory=dict)  # path -> TODO findings (changed or not)
    #: files that do not parse (or cannot be read, or are no notebook): the file's fault, left as they were
    unparsable: dict[Path, str] = field(default_factory=dict)
    #: files the tool itself failed on (a bug of the tool: please report), left as they were
    failed: dict[Path, str] = field(default_factory=dict)
    #: notebooks' code cells that do not parse (each left as it was; the notebook's other cells convert)
    unparsable_cells: dict[Path, dict[int, str]] = field(default_factory=dict)
    #: notebooks' code cells the tool failed on (a bug of the tool; each left as it was)
    failed_cells: dict[Path, dict[int, str]] = field(default_factory=dict)
    notes: dict[Path, list] = field(default_factory=dict)
    scanned: int = 0

    def merge(self, path: Path, other: RunReport) -> None:
        """Take what ``other`` (one file's conversion) recorded about ``path`` as it stopped: unparsable or failed,
        and its notebook cells."""
        for reasons, theirs in ((self.unparsable, other.unparsable), (self.failed, other.failed)):
            if path in theirs:
                reasons[path] = theirs[path]
        for cells, their_cells in (
            (self.unparsable_cells, other.unparsable_cells),
            (self.failed_cells, other.failed_cells),
        ):
            if path in their_cells:
                cells[path] = their_cells[path]

    def findings(self) -> list:
        """Every change, TODO and note of the run."""
        return [f for group in (self.changed, self.todos, self.notes) for fs in group.values() for f in fs]


#: What a run converts: Python files, and Jupyter notebooks (their code cells).
SUFFIXES = (".py", ".ipynb")


def python_files(paths: Iterable[Path]) -> list[Path]:
    """The ``.py`` and ``.ipynb`` files named, and those under the folders named (sorted, skipping virtualenvs, VCS
    folders and notebook checkpoints).

    Raises:
        FileNotFoundError: a path does not exist, or a folder holds no such file.
    """
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: pass .py or .ipynb files or folders that hold them")
        if path.is_file():
            found.append(path)
            continue
        before = len(found)
        for candidate in sorted(c for suffix in SUFFIXES for c in path.rglob(f"*{suffix}")):
            if not SKIPPED_DIRS.intersection(candidate.relative_to(path).parts[:-1]):
                found.append(candidate)
        if len(found) == before:
            raise FileNotFoundError(f"{path} holds no .py or .ipynb file (virtualenvs and build folders are skipped)")
    return list(dict.fromkeys(found))


def upgrade_paths(
    paths: Iterable[Path], write: bool = False, out: TextIO | None = None, jobs: int | None = None
) -> RunReport:
    """Upgrade every Python file and notebook under ``paths``; print the diff to ``out`` unless ``write``.

    Args:
        paths: files and folders.
        write: apply the changes in place instead of printing the diff.
        out: where the diff goes (default: standard output).
        jobs: processes that convert files side by side; None: one per CPU this process may use, where there are
            enough files to pay for starting them (:func:`default_jobs`). The report, the diff and the files written
            are the same whatever the number.

    Returns:
        The run's report (changes and TODOs with line numbers, the files that did not parse and those the tool
        failed on).

    Raises:
        FileNotFoundError: a path does not exist (before any file is touched).
        MissingDependencyError: a notebook is among the files and nbformat (the ``upgrade`` extra) is missing.

    Example::

        report = upgrade_paths([Path("train.py")], write=True)
    """
    out = out or sys.stdout
    report = RunReport()
    files = python_files(paths)
    for path, converted in zip(files, _convert_all(files, default_jobs(len(files)) if jobs is None else jobs)):
        report.scanned += 1
        if converted.missing is not None:
            raise converted.missing
        report.merge(path, converted.report)
        if converted.outcome is None:
            continue
        source = converted.source
        new, findings, diffs = converted.outcome
        for finding in findings:
            group = report.todos if finding.todo else report.notes if finding.note else None
            if group is not None:
                group.setdefault(path, []).append(finding)
        if new == source:
            continue
        report.changed[path] = [f for f in findings if not f.todo and not f.note]
        if write:
            _write_atomically(path, new)
        else:
            for label, before, after in diffs:
                out.writelines(
                    difflib.unified_diff(
                        before.splitlines(keepends=True),
                        after.splitlines(keepends=True),
                        f"a/{path}{label}",
                        f"b/{path}{label}",
                    )
                )
    return report


#: Files per process below which a run stays in one process (starting one costs about as much as converting them).
FILES_PER_JOB = 8


def default_jobs(files: int) -> int:
    """Processes for ``files`` files: one per CPU this process may use, at most one per :data:`FILES_PER_JOB` files."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, files // FILES_PER_JOB))


@dataclass
class _Converted:
    """One file's conversion, as a worker process hands it back."""

    source: str = ""
    outcome: tuple[str, list, list[tuple[str, str, str]]] | None = None
    report: RunReport = field(default_factory=RunReport)  # what _upgrade_file recorded about the file
    missing: Exception | None = None  # a missing optional dependency: the run stops with it


def _convert(path: Path) -> _Converted:
    """Read and convert one file (in a worker process, or in this one)."""
    from lightning_mgpu.utilities.imports import MissingDependencyError

    converted = _Converted()
    try:
        converted.source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        converted.report.unparsable[path] = f"cannot be read ({err})"
        return converted
    try:
        converted.outcome = _upgrade_file(path, converted.source, converted.report)
    except MissingDependencyError as err:
        converted.missing = err
    return converted


def _convert_all(files: list[Path], jobs: int) -> Iterator[_Converted]:
    """Each file's conversion, in the files' order; ``jobs`` processes side by side where there is more than one.

    Decision: fork where the platform has it (the parent has libcst and the rules imported already, so a worker starts
    in milliseconds, and this command imports neither torch nor Lightning, whose threads fork would not carry);
    elsewhere the platform's default start method.
    """
    if jobs <= 1 or len(files) <= 1:
        yield from map(_convert, files)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import lightning_mgpu.upgrade.notebook  # noqa: F401  (imported once here, not once per worker)
    import lightning_mgpu.upgrade.transform  # noqa: F401

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=context) as pool:
        yield from pool.map(_convert, files)  # one file at a time: a large file late in the list does not hold a batch


def _upgrade_file(path: Path, source: str, report: RunReport) -> tuple[str, list, list[tuple[str, str, str]]] | None:
    """One file's new text, findings and diffs (``(label, before, after)``: one per changed notebook cell); None where
    it is left as it was (recorded in ``report``)."""
    import libcst as cst

    from lightning_mgpu.upgrade.transform import syntax_error, upgrade_source
    from lightning_mgpu.utilities.imports import MissingDependencyError

    try:
        if path.suffix == ".ipynb":
            from lightning_mgpu.upgrade.notebook import NotebookError, upgrade_notebook

            try:
                notebook = upgrade_notebook(source)
            except NotebookError as err:
                report.unparsable[path] = f"is not a notebook this tool reads ({err})"
                return None
            if notebook.unparsable:
                report.unparsable_cells[path] = notebook.unparsable
            if notebook.failed:
                report.failed_cells[path] = notebook.failed
            # A cell seldom ends in a line break: each side gets one, so that the diff reads as lines.
            diffs = [
                (f" (cell {c.index})", c.before + "\n", c.after + "\n") for c in notebook.cells if c.after != c.before
            ]
            return notebook.text, notebook.findings, diffs
        try:
            result = upgrade_source(source)
        except cst.ParserSyntaxError:
            # Python refuses it: a script in IPython's syntax (``%cd``, ``!pip`` lines) converts as a notebook cell.
            from lightning_mgpu.upgrade.notebook import upgrade_ipython_script

            script = upgrade_ipython_script(source)
            if script is None:
                raise
            result = script
    except cst.ParserSyntaxError as err:
        from lightning_mgpu.upgrade.notebook import mask_ipython

        masked = mask_ipython(source)  # where the file is IPython's, the error Python sees once its lines are masked
        where = masked[0] if masked is not None and masked[1] else source
        report.unparsable[path] = f"does not parse ({syntax_error(where, err)})"
        return None
    except MissingDependencyError:
        raise  # nbformat is missing: the run stops with the extra to install
    except Exception as err:  # noqa: BLE001  (one file the tool cannot handle must not stop the others)
        log.debug("upgrade failed on %s", path, exc_info=True)
        report.failed[path] = f"the tool failed on it ({type(err).__name__}: {err}; please report it)"
        return None
    return result.source, result.findings, [("", source, result.source)]


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` whole or not at all (a kill mid-write leaves the user's file as it was)."""
    tmp = path.with_name(f".{path.name}.lightning-mgpu-upgrade.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(path.stat().st_mode & 0o7777)
    tmp.replace(path)


def _where(path: Path, finding: object) -> str:
    cell = getattr(finding, "cell", None)
    return f"{path}:cell {cell}:{finding.line}" if cell is not None else f"{path}:{finding.line}"  # type: ignore[attr-defined]


def summary(report: RunReport, write: bool) -> str:
    """The run's summary: each change, TODO and note with file:line (``file:cell N:line`` in a notebook), the files
    and cells left as they were, the counts by rule, and a total."""
    entries: list[tuple[str, int, int, str]] = []
    for group in (report.changed, report.todos, report.notes):
        for path, findings in group.items():
            entries += [
                (
                    str(path),
                    f.cell or 0,
                    f.line,
                    f"{_where(path, f)}: {f.message}" + (f" [{f.rule}]" if group is report.changed else ""),
                )
                for f in findings
            ]
    lines = [text for *_, text in sorted(entries, key=lambda e: e[:3])]
    for path, cells in report.unparsable_cells.items():
        lines += [
            f"{path}:cell {cell}: does not parse ({why}); the cell is left as it was" for cell, why in cells.items()
        ]
    for path, cells in report.failed_cells.items():
        lines += [
            f"{path}:cell {cell}: the tool failed on it ({why}; please report it); the cell is left as it was"
            for cell, why in cells.items()
        ]
    for path, reason in report.unparsable.items():
        lines.append(f"{path}: skipped, {reason}; left untouched")
    for path, reason in report.failed.items():
        lines.append(f"{path}: skipped, {reason}; left untouched")
    verb = "changed" if write else "would change"
    lines.append(
        f"lightning-mgpu upgrade: {len(report.changed)} of {report.scanned} file(s) {verb}"
        f" ({sum(len(v) for v in report.changed.values())} rewrite(s)), {sum(len(v) for v in report.todos.values())}"
        f" TODO(s) left for a person, {len(report.unparsable)} file(s) that do not parse skipped,"
        f" {len(report.failed)} file(s) the tool failed on"
        + (f" (and {sum(map(len, report.failed_cells.values()))} notebook cell(s))" if report.failed_cells else "")
        + ("" if write or not report.changed else "; run again with --write to apply")
    )
    for what, group in (("rewrites", report.changed), ("TODOs", report.todos), ("notes", report.notes)):
        counts = Counter(f.rule for findings in group.values() for f in findings)
        if counts:
            by_rule = ", ".join(
                f"{rule} {n}" for rule, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            )
            lines.append(f"{what} by rule: {by_rule}")
    if report.todos or report.notes or report.changed:
        lines.append(
            "lightning-mgpu upgrade --explain RULE prints a rule in full (what a TODO(lightning-mgpu:RULE) asks)"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``upgrade`` subcommand's arguments."""
    parser.add_argument("paths", nargs="*", type=Path, help=".py and .ipynb files, or folders to walk")
    parser.add_argument(
        "--write", action="store_true", help="apply the changes in place (default: print a unified diff)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="processes converting files side by side (default: one per CPU, where there are enough files)",
    )
    parser.add_argument(
        "--explain", metavar="RULE", help="print the full text of a rule named in a TODO(lightning-mgpu:RULE) and exit"
    )
    parser.add_argument(
        "--rules-markdown", action="store_true", help="print the table of every rule (docs/upgrade.md's) and exit"
    )


def explain(rule_id: str) -> str | None:
    """A rule's full text (None for an unknown rule)."""
    from lightning_mgpu.upgrade.rules import explain as rule_text

    return rule_text(rule_id)


def main(args: argparse.Namespace) -> int:
    """``lightning-mgpu upgrade``: returns the exit status."""
    from lightning_mgpu.utilities.imports import MissingDependencyError, require

    if args.rules_markdown:
        from lightning_mgpu.upgrade.rules import rules_markdown

        print(rules_markdown())  # noqa: T201  (the command's own output)
        return 0
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
        print(  # noqa: T201
            "lightning-mgpu upgrade: error: name .py or .ipynb files or folders (or --explain RULE)", file=sys.stderr
        )
        return 2
    if args.jobs is not None and args.jobs < 1:
        print(f"lightning-mgpu upgrade: error: --jobs {args.jobs}: pass 1 or more", file=sys.stderr)  # noqa: T201
        return 2
    try:
        require("libcst", "lightning-mgpu upgrade")
        report = upgrade_paths(args.paths, write=args.write, jobs=args.jobs)
    except (FileNotFoundError, MissingDependencyError) as err:
        print(f"lightning-mgpu upgrade: error: {err}", file=sys.stderr)  # noqa: T201  (the command's own output)
        return 2
    print(summary(report, args.write), file=sys.stderr)  # noqa: T201  (the command's own output; the diff is stdout)
    return 0
