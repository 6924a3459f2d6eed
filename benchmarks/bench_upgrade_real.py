"""``lightning-mgpu upgrade`` on real public Lightning 1.x files: how much it converts with nothing left for a person.

The corpus (``benchmarks/upgrade_real/README.md``) is a folder of files outside the repository and the manifest that
names each one (repository, commit, path, git blob id). The benchmark copies the folder to a temporary one, checks every
file's blob id against the manifest, runs the tool on each ``.py`` file as ``--write`` does (the library API,
in-process), and reports per file and in total:

- converted: the tool ran on it (changed or not); changed: it wrote something;
- fully converted: converted, compiles, no TODO and no unmarked 1.x spelling left;
- compiles: ``compile()`` of the output (a script in IPython's syntax, ``%cd``/``!pip`` lines, with those lines
  masked as the tool converts it); idempotent: a second run changes nothing;
- TODOs by rule (the ``# TODO(lightning-mgpu:RULE)`` comments the run added) and the files each rule leaves;
- unmarked 1.x spellings left, by kind (:func:`lightning_mgpu.upgrade.leftovers.unmarked`, which reads the output with
  ``ast``, independently of the transformer);
- tool failures (an exception, or a file the tool reported it failed on) and files that did not parse (their own
  syntax: Python 2, a broken file);
- the seconds the tool took over the whole corpus, file by file in this process; and the speed a user sees:
  ``upgrade_paths`` over a copy of every ``.py`` file at once, with its default processes (one per CPU) and with one,
  as seconds per 100 files (issue 53's goal: at most 20 s on 2 cores).

Notebooks: until the tool converts ``.ipynb`` files they count as "not yet supported"; their code cells (lines
starting with ``%``, ``!`` or ``?`` left out) are converted as one module anyway, to report what they would need.

    python -m benchmarks.bench_upgrade_real --corpus /work/scratch/upgrade_real
    python -m benchmarks.bench_upgrade_real --corpus DIR --json benchmarks/results/DATE_upgrade_real/results.json \\
        --label final
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.notebook import mask_ipython, python_file_cell, upgrade_ipython_script
from lightning_mgpu.upgrade.run import default_jobs, upgrade_paths
from lightning_mgpu.upgrade.transform import upgrade_source

HERE = Path(__file__).resolve().parent
DEFAULT_MANIFEST = HERE / "upgrade_real" / "manifest.tsv"
TODO_RE = re.compile(r"TODO\(lightning-mgpu:([\w-]+)\)")


@dataclass
class FileFigures:
    """What the tool did to one file."""

    id: str
    repo: str
    path: str
    era: str
    kind: str
    status: str = "converted"  # converted | did not parse | tool failure | not yet supported
    reason: str = ""
    changed: bool = False
    compiles: bool = False
    idempotent: bool = False
    todos: dict[str, int] = field(default_factory=dict)
    unmarked: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def fully_converted(self) -> bool:
        return self.status == "converted" and self.compiles and self.idempotent and not self.todos and not self.unmarked


def git_blob(data: bytes) -> str:
    """The id git gives ``data`` as a blob (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def read_manifest(path: Path) -> list[dict[str, str]]:
    """The manifest's rows (tab-separated, with a header line)."""
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def notebook_code(text: str) -> str:
    """A notebook's code cells as one module, without magics, shell escapes and help lines.

    Raises:
        ValueError: ``text`` is not a notebook's JSON.
    """
    notebook = json.loads(text)
    cells = []
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        # IPython's lines masked as the tool masks them (``x = !cmd`` too, and a shell line alone in a block).
        masked = mask_ipython(source)
        if masked is None:
            written = python_file_cell(source)
            if written is None:
                continue  # %%bash, a YAML file written: not Python
            masked = (written[1], [])
        cells.append(masked[0].rstrip("\n") + "\n")
    return "\n".join(cells)


def _todos(before: str, after: str) -> dict[str, int]:
    """The TODO comments the run added, by rule."""
    added = Counter(TODO_RE.findall(after))
    added.subtract(Counter(TODO_RE.findall(before)))
    return {rule: n for rule, n in sorted(added.items()) if n > 0}


def _unmarked(source: str) -> dict[str, int]:
    return dict(sorted(Counter(what for _, what in unmarked(source)).items()))


def _compiles(source: str) -> bool:
    try:
        compile(source, "<upgraded>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _python_view(source: str) -> str:
    """``source`` as Python: a script in IPython's syntax (``%cd``, ``!pip`` lines) with those lines masked, as the
    tool converts it; anything else as it is."""
    if _compiles(source):
        return source
    masked = mask_ipython(source)
    return masked[0] if masked is not None and masked[1] else source


def _second_run(source: str) -> str:
    """What a second run of the tool makes of an output (through the same path as the first)."""
    if _compiles(source):
        return upgrade_source(source).source
    script = upgrade_ipython_script(source)
    return source if script is None else script.source


def measure_python(path: Path, figures: FileFigures) -> None:
    """Run the tool on one ``.py`` file in place, as ``--write`` does, and fill in ``figures``."""
    original = path.read_text(encoding="utf-8", errors="surrogateescape")
    parses = _compiles(_python_view(original))
    start = time.perf_counter()
    try:
        report = upgrade_paths([path], write=True, out=io.StringIO())
    except Exception as err:  # noqa: BLE001  (a tool failure is a figure, not the end of the run)
        figures.seconds = time.perf_counter() - start
        figures.status, figures.reason = "tool failure", f"{type(err).__name__}: {err}"
        return
    figures.seconds = time.perf_counter() - start
    skipped = getattr(report, "unparsable", {}).get(path)
    if skipped is not None:
        figures.status = "tool failure" if parses else "did not parse"
        figures.reason = str(skipped)
        return
    if not parses:
        figures.status, figures.reason = "did not parse", "compile() refuses the original"
        return
    after = path.read_text(encoding="utf-8")
    figures.changed = after != original
    figures.compiles = _compiles(_python_view(after))
    try:
        figures.idempotent = _second_run(after) == after
    except Exception as err:  # noqa: BLE001
        figures.idempotent, figures.reason = False, f"second run: {type(err).__name__}: {err}"
    figures.todos = _todos(original, after)
    figures.unmarked = _unmarked(_python_view(after)) if figures.compiles else {}


def measure_notebook(path: Path, figures: FileFigures) -> None:
    """A notebook: "not yet supported" until the tool has a notebook module; its code cells measured all the same."""
    text = path.read_text(encoding="utf-8")
    supported = importlib.util.find_spec("lightning_mgpu.upgrade.notebook") is not None
    if supported:
        start = time.perf_counter()
        try:
            report = upgrade_paths([path], write=True, out=io.StringIO())
        except Exception as err:  # noqa: BLE001
            figures.status, figures.reason = "tool failure", f"{type(err).__name__}: {err}"
            return
        figures.seconds = time.perf_counter() - start
        if path in getattr(report, "unparsable", {}):
            figures.status, figures.reason = "tool failure", str(report.unparsable[path])
            return
        after_text = path.read_text(encoding="utf-8")
        figures.changed = after_text != text
        code, after = notebook_code(text), notebook_code(after_text)
    else:
        figures.status = "not yet supported"
        code = notebook_code(text)
        if not _compiles(code):
            figures.reason = "its code cells do not compile"
            return
        start = time.perf_counter()
        try:
            after = upgrade_source(code).source
        except Exception as err:  # noqa: BLE001
            figures.reason = f"code cells: {type(err).__name__}: {err}"
            return
        figures.seconds = time.perf_counter() - start
    figures.compiles = _compiles(after)
    figures.idempotent = figures.compiles and upgrade_source(after).source == after
    figures.todos = _todos(code, after)
    figures.unmarked = _unmarked(after) if figures.compiles else {}


def _share(n: int, of: int) -> str:
    return f"{n}/{of} ({100 * n / of:.1f} %)" if of else "0/0"


def totals(files: list[FileFigures], seconds: float) -> dict[str, Any]:
    """The run's figures over the ``.py`` files, and the notebooks' apart."""
    py = [f for f in files if f.kind == "py"]
    notebooks = [f for f in files if f.kind != "py"]
    converted = [f for f in py if f.status == "converted"]
    todo_rules: Counter[str] = Counter()
    files_by_rule: Counter[str] = Counter()
    unmarked_kinds: Counter[str] = Counter()
    files_by_kind: Counter[str] = Counter()
    for f in converted:
        todo_rules.update(f.todos)
        files_by_rule.update(f.todos.keys())
        unmarked_kinds.update(f.unmarked)
        files_by_kind.update(f.unmarked.keys())
    nb_rules: Counter[str] = Counter()
    nb_unmarked: Counter[str] = Counter()
    for f in notebooks:
        nb_rules.update(f.todos)
        nb_unmarked.update(f.unmarked)
    return {
        "py_files": len(py),
        "converted": len(converted),
        "changed": sum(f.changed for f in converted),
        "fully_converted": sum(f.fully_converted for f in py),
        "compiles": sum(f.compiles for f in converted),
        "idempotent": sum(f.idempotent for f in converted),
        "with_todos": sum(bool(f.todos) for f in converted),
        "with_unmarked": sum(bool(f.unmarked) for f in converted),
        "todos": sum(todo_rules.values()),
        "todos_by_rule": dict(todo_rules.most_common()),
        "files_by_rule": dict(files_by_rule.most_common()),
        "unmarked": sum(unmarked_kinds.values()),
        "unmarked_by_kind": dict(unmarked_kinds.most_common()),
        "files_by_unmarked_kind": dict(files_by_kind.most_common()),
        "tool_failures": [f"{f.id}: {f.reason}" for f in py if f.status == "tool failure"],
        "did_not_parse": [f"{f.id}: {f.reason}" for f in py if f.status == "did not parse"],
        "tool_seconds": round(sum(f.seconds for f in py), 2),
        "seconds": round(seconds, 2),
        "notebooks": {
            "files": len(notebooks),
            "not_yet_supported": sum(f.status == "not yet supported" for f in notebooks),
            "fully_converted": sum(
                f.compiles and f.idempotent and not f.todos and not f.unmarked and not f.reason for f in notebooks
            ),
            "code_cells_compile": sum(f.compiles for f in notebooks),
            "todos_by_rule": dict(nb_rules.most_common()),
            "unmarked_by_kind": dict(nb_unmarked.most_common()),
        },
    }


def print_report(files: list[FileFigures], total: dict[str, Any]) -> None:
    """The per-file table and the totals, on standard output."""
    print(f"{'id':>4} {'kind':5} {'status':18} chg cmp idm {'s':>6}  todos / unmarked")
    for f in files:
        todos = ",".join(f"{k}:{v}" for k, v in f.todos.items())
        left = ",".join(f"{k}:{v}" for k, v in f.unmarked.items())
        status = "fully converted" if f.fully_converted else f.status
        print(
            f"{f.id:>4} {f.kind:5} {status:18} {'yes' if f.changed else ' - '} {'yes' if f.compiles else ' - '}"
            f" {'yes' if f.idempotent else ' - '} {f.seconds:6.2f}  {todos}{' / ' + left if left else ''}"
            f"{'  (' + f.reason[:80] + ')' if f.reason else ''}"
        )
    n = total["py_files"]
    print()
    print(f".py files: {n}; converted {_share(total['converted'], n)}, changed {total['changed']}")
    print(f"fully converted (no TODO, nothing unmarked, compiles): {_share(total['fully_converted'], n)}")
    print(f"compiles {total['compiles']}/{total['converted']}, idempotent {total['idempotent']}/{total['converted']}")
    print(f"left for a person: {_share(total['with_todos'], n)} with a TODO, {total['todos']} TODOs")
    for rule, count in total["todos_by_rule"].items():
        print(f"  {rule:36} {count:4} TODOs in {_share(total['files_by_rule'][rule], n)} files")
    print(f"unmarked 1.x spellings: {total['unmarked']} in {total['with_unmarked']} files")
    for kind, count in total["unmarked_by_kind"].items():
        print(f"  {kind:48} {count:4} in {total['files_by_unmarked_kind'][kind]} files")
    print(f"tool failures: {len(total['tool_failures'])}", *total["tool_failures"], sep="\n  ")
    print(f"did not parse: {len(total['did_not_parse'])}", *total["did_not_parse"], sep="\n  ")
    nb = total["notebooks"]
    print(
        f"notebooks: {nb['files']} ({nb['not_yet_supported']} not yet supported); their code cells: "
        f"{nb['fully_converted']} would convert fully, TODOs {nb['todos_by_rule']}, unmarked {nb['unmarked_by_kind']}"
    )
    print(f"seconds: {total['tool_seconds']} in the tool, {total['seconds']} for the whole run")
    sp = total.get("speed")
    if sp:
        print(
            f"speed: {sp['default_jobs_s_per_100_files']} s per 100 files with {sp['jobs']} process(es) (the default"
            f" on {sp['cpus']} CPU(s)), {sp['one_job_s_per_100_files']} s with one; goal: at most 20 s on 2 cores"
        )


def _revision() -> str:
    try:
        head = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "-C", str(HERE), "status", "--porcelain", "--", "../lightning_mgpu/upgrade"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown"
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def run(corpus: Path, manifest: Path) -> tuple[list[FileFigures], dict[str, Any]]:
    """Copy the corpus, check it against the manifest, and measure every file.

    Args:
        corpus: the folder that holds ``files/`` (or the files themselves).
        manifest: the manifest (id, repo, commit, path, blob, era, kind, ...).

    Returns:
        Each file's figures and the totals.

    Raises:
        FileNotFoundError: a file the manifest names is missing.
        ValueError: a file's bytes are not the ones the manifest names.
    """
    source_dir = corpus / "files" if (corpus / "files").is_dir() else corpus
    by_id = {p.name.split("__", 1)[0]: p for p in source_dir.iterdir() if p.is_file()}
    rows = read_manifest(manifest)
    files: list[FileFigures] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="upgrade_real_") as tmp:
        work = Path(tmp)
        for row in rows:
            original = by_id.get(row["id"])
            if original is None:
                raise FileNotFoundError(f"{row['id']} ({row['repo']}:{row['path']}) is not in {source_dir}")
            data = original.read_bytes()
            if git_blob(data) != row["blob"]:
                raise ValueError(f"{original.name}: blob {git_blob(data)} is not the manifest's {row['blob']}")
            copy = work / original.name
            shutil.copyfile(original, copy)
            figures = FileFigures(row["id"], row["repo"], row["path"], row["era"], row["kind"])
            if row["kind"] == "py":
                measure_python(copy, figures)
            else:
                measure_notebook(copy, figures)
            files.append(figures)
        total = totals(files, time.perf_counter() - started)
        total["speed"] = speed([source_dir / by_id[r["id"]].name for r in rows if r["kind"] == "py"], work)
    return files, total


def speed(originals: list[Path], work: Path) -> dict[str, Any]:
    """Seconds per 100 files of ``upgrade_paths(..., write=True)`` over fresh copies of ``originals`` at once, with
    the default processes and with one (the same files, side by side in one run)."""
    figures: dict[str, Any] = {"files": len(originals), "cpus": default_jobs(10**6)}
    for label, jobs in (("default_jobs", None), ("one_job", 1)):
        folder = work / f"speed_{label}"
        folder.mkdir()
        for original in originals:
            shutil.copyfile(original, folder / original.name)
        start = time.perf_counter()
        upgrade_paths([folder], write=True, out=io.StringIO(), jobs=jobs)
        figures[f"{label}_s_per_100_files"] = round((time.perf_counter() - start) * 100 / len(originals), 2)
    figures["jobs"] = default_jobs(len(originals))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="the folder with files/ (and its manifest)")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="default: %(default)s")
    parser.add_argument("--json", type=Path, help="write the figures here (merged into an existing file by --label)")
    parser.add_argument("--label", default="run", help="the run's name in the JSON file (baseline, final, ...)")
    args = parser.parse_args(argv)
    files, total = run(args.corpus, args.manifest)
    print_report(files, total)
    if args.json is not None:
        existing = json.loads(args.json.read_text()) if args.json.exists() else {"runs": {}}
        existing.setdefault("runs", {})[args.label] = {
            "revision": _revision(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "python": sys.version.split()[0],
            "totals": total,
            "files": [{**asdict(f), "fully_converted": f.fully_converted} for f in files],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(existing, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
