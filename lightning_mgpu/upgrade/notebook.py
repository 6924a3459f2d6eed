"""Jupyter notebooks for ``lightning-mgpu upgrade``: each code cell converted as a file of its own.

IPython's own syntax stays as it was: line magics (``%load_ext tensorboard``, and ``pip install ...`` or
``matplotlib inline`` written without the ``%`` that IPython's automagic lets a notebook leave out), shell lines
(``!pip install ...``, also continued with ``\\``, and ``files = !ls``), help lines (``Trainer?``, ``??fit``) and cell
magics. A cell under a Python cell magic (``%%time``, ``%%capture``, ...) has its body converted; a cell that writes a
Python file (``%%writefile model.py``: course material keeps its LightningModule there) has its body converted as
that file, with its own imports; any other cell magic (``%%bash``, ``%%writefile config.yaml``, ...) leaves the cell
alone. Each such line is swapped for a placeholder statement while the cell is
rewritten, so line numbers stay the cell's own, and put back afterwards. Markdown, outputs, execution counts and
metadata are not touched; the file keeps its JSON layout (indentation, key order) where it can, and is checked with
``nbformat.validate`` before it is written. A cell that does not parse stays as it is and is reported; the others
convert.

Cells share no pre-pass: a dict of Trainer settings built in one cell and splatted in another is the ``trainer-splat``
TODO. The Lightning namespace a notebook imports, its aliases (``import pytorch_lightning as pl``,
``import pytorch_lightning.callbacks as cb``) and the torchmetrics names it imports (``from torchmetrics import
Accuracy`` in one cell, ``Accuracy()`` in another) are read from all its cells.
"""

from __future__ import annotations

import ast
import codeop
import json
import logging
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from lightning_mgpu.upgrade.findings import FileResult, Finding, UpgradeError, namespace_of, syntax_error
from lightning_mgpu.upgrade.imports import NESTED_SUBPACKAGES, SUBPACKAGES
from lightning_mgpu.upgrade.rules import BUNDLE_FOR_NAMESPACE
from lightning_mgpu.upgrade.trainer_owners import notebook_trainers
from lightning_mgpu.upgrade.transform import upgrade_source
from lightning_mgpu.upgrade.tuner import notebook_unused_trainers

log = logging.getLogger(__name__)

#: Cell magics whose body is Python: it is converted (``%%time`` and its first line kept).
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
_PLACEHOLDER = "__lightning_mgpu_ipython_{}__"
_PLACEHOLDER_LINE = re.compile(r"[ \t]*__lightning_mgpu_ipython_(\d+)__[ \t]*")
#: ``files = !ls``, ``t = %timeit -o f()``: no Python expression starts with ``!`` or ``%``.
_ASSIGNED_MAGIC = re.compile(r"[ \t]*[A-Za-z_][\w.,\s]*=[ \t]*[!%]")
#: ``Trainer?``, ``pl.Trainer.fit??``, ``?Trainer``.
_HELP = re.compile(r"[ \t]*(\?{1,2}[\w.]+|[\w.]+\?{1,2})[ \t]*")
#: IPython's automagic: with it on (the default) a line magic or shell alias works without its ``%``: ``pip install
#: pytorch-lightning``, ``matplotlib inline``, ``cd ..``, ``load_ext tensorboard``. Such a line is IPython's only when
#: Python refuses it on its own (``ls = [1,`` opens a list, ``time`` alone is a name).
_AUTOMAGIC = re.compile(
    r"[ \t]*(?:pip|conda|mamba|cd|pwd|ls|ll|mkdir|rmdir|rm|cp|mv|cat|env|load_ext|reload_ext|unload_ext|matplotlib|"
    r"tensorboard|time|timeit|run|autoreload|aimport|pylab|who|whos|history|reset|store|pushd|popd|sx|system|config|"
    r"set_env|writefile)[ \t]+\S.*"
)
#: ``%%writefile model.py``, ``%%writefile -a src/train.py``: the cell's body is that Python file.
_WRITES_PYTHON = re.compile(r"%%writefile(?:[ \t]+(?:-a|--append))?[ \t]+(['\"]?)[^'\"\s]+\.py\1[ \t]*")


class NotebookError(ValueError):
    """A file that is not a notebook this tool can rewrite (not JSON, or not nbformat 4)."""


@dataclass
class CellResult:
    """One code cell that changed, or that has something for a person."""

    index: int  # counting every cell of the notebook from 1 (markdown too)
    before: str
    after: str
    findings: list[Finding] = field(default_factory=list)


@dataclass
class NotebookResult:
    """A notebook's rewritten text and what happened to its cells."""

    text: str  # the whole file, identical to the input when no cell changed
    cells: list[CellResult] = field(default_factory=list)
    unparsable: dict[int, str] = field(default_factory=dict)  # cell -> Python's line and message
    failed: dict[int, str] = field(default_factory=dict)  # cell -> the exception the tool raised on it (a bug)

    @property
    def findings(self) -> list[Finding]:
        return [f for cell in self.cells for f in cell.findings]


def mask_ipython(source: str) -> tuple[str, list[str]] | None:
    """``source`` with each IPython-only line replaced by a placeholder statement at its indentation, and the lines
    replaced (placeholder ``i`` stands for ``lines[i]``); None for a cell under a non-Python cell magic."""
    lines = source.splitlines(keepends=True)
    masked: list[str] = []
    originals: list[str] = []

    def mask(line: str, indent: str) -> None:
        body = line.rstrip("\r\n")
        masked.append(f"{indent}{_PLACEHOLDER.format(len(originals))}{line[len(body) :]}")
        originals.append(body)

    continued_indent: str | None = None
    for number, line in enumerate(lines):
        stripped = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        if continued_indent is not None:  # the rest of a shell line or magic continued with a backslash
            mask(line, continued_indent)
            continued_indent = continued_indent if stripped.endswith("\\") else None
            continue
        if number == 0 and stripped.startswith("%%"):
            if stripped[2:].split(" ", 1)[0] not in PYTHON_CELL_MAGICS:
                return None
            mask(line, "")
            continue
        if (
            stripped.startswith(("%", "!"))
            or (stripped.startswith("?") and len(stripped) > 1)
            or _ASSIGNED_MAGIC.match(line)
            or _HELP.fullmatch(line.rstrip("\r\n"))
            or _is_automagic(line)
        ):
            mask(line, indent)
            continued_indent = indent if stripped.endswith("\\") else None
            continue
        masked.append(line)
    return "".join(masked), originals


def _is_automagic(line: str) -> bool:
    """Whether ``line`` is an automagic line (``pip install x``): a magic's name first, and Python refuses the line on
    its own (a syntax error, not the start of a longer statement)."""
    if not _AUTOMAGIC.fullmatch(line.rstrip("\r\n")):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an invalid escape in a shell line is not ours to report
            codeop.compile_command(line.strip(), symbol="exec")
    except (SyntaxError, ValueError, OverflowError):
        return True
    return False


def upgrade_ipython_script(source: str) -> FileResult | None:
    """A ``.py`` file in IPython's syntax, converted like one notebook cell: a Jupytext/VS Code "percent" script
    (``# %%`` cells) or an exported notebook keeps lines such as ``%cd ..`` and ``!pip install ...``, which Python
    refuses. Each such line is masked while the file is rewritten and put back after.

    Args:
        source: the file's text, which does not parse as Python.

    Returns:
        The upgraded file and its findings (line numbers the file's own), or None where masking finds no IPython line
        or the file opens with a cell magic whose body is not Python.

    Raises:
        libcst.ParserSyntaxError: the masked file does not parse either.
    """
    masked = mask_ipython(source) if "__lightning_mgpu_ipython_" not in source else None
    if masked is None or not masked[1]:
        return None
    code, originals = masked
    result = upgrade_source(code)
    return FileResult(unmask_ipython(result.source, originals), result.findings, result.renamed)


def python_file_cell(source: str) -> tuple[str, str] | None:
    """A ``%%writefile <path>.py`` cell's magic line and body (the Python file it writes), or None for another cell."""
    first, _, body = source.partition("\n")
    if not _WRITES_PYTHON.fullmatch(first.rstrip("\r")):
        return None
    return first + "\n", body


def unmask_ipython(source: str, originals: list[str]) -> str:
    """Put back the lines :func:`mask_ipython` replaced (each placeholder once, wherever the rewrite left it)."""
    out = []
    for line in source.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        found = _PLACEHOLDER_LINE.fullmatch(body)
        out.append(originals[int(found.group(1))] + line[len(body) :] if found else line)
    return "".join(out)


_NAMESPACE_ALIAS = re.compile(
    r"^[ \t]*(?:import[ \t]+(pytorch_lightning|lightning\.pytorch)(?:[ \t]+as[ \t]+(\w+))?"
    r"|from[ \t]+lightning[ \t]+import[ \t]+pytorch(?:[ \t]+as[ \t]+(\w+))?)[ \t]*(?:#.*)?$",
    re.MULTILINE,
)


def notebook_context(code: str) -> tuple[str, dict[str, str]]:
    """The Lightning namespace all of a notebook's code imports, and its aliases (``{"pl": "pytorch_lightning"}``), so
    that a cell that uses ``pl.Trainer`` without importing it converts like the rest."""
    aliases = {}
    for match in _NAMESPACE_ALIAS.finditer(code):
        module, alias, lightning_alias = match.groups()
        if module:
            aliases[alias or module] = module
        else:
            aliases[lightning_alias or "pytorch"] = "lightning.pytorch"
    return namespace_of(code), aliases


def submodule_imports(sources: list[str]) -> dict[str, tuple[str, str]]:
    """The Lightning subpackages a notebook's cells import under a name of their own (``import
    pytorch_lightning.callbacks as cb``, ``from pytorch_lightning import loggers``), as the tool's import pass records
    them for one file, so that another cell's ``cb.GPUStatsMonitor()`` converts as in one file. A cell that does not
    parse (IPython lines masked) adds nothing."""
    found: dict[str, tuple[str, str]] = {}
    for source in sources:
        masked = mask_ipython(source)
        try:
            tree = ast.parse(masked[0] if masked else source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    namespace = next((ns for ns in BUNDLE_FOR_NAMESPACE if alias.name.startswith(ns + ".")), None)
                    if namespace is not None and alias.asname:
                        found[alias.asname] = (namespace, alias.name[len(namespace) + 1 :])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                module = node.module
                namespace = next(
                    (ns for ns in BUNDLE_FOR_NAMESPACE if module == ns or module.startswith(ns + ".")), None
                )
                if namespace is None:
                    continue
                below = module[len(namespace) + 1 :]
                for alias in node.names:
                    name = f"{below}.{alias.name}" if below else alias.name
                    if (not below and alias.name in SUBPACKAGES) or name in NESTED_SUBPACKAGES:
                        found[alias.asname or alias.name] = (namespace, name)
    return found


def metric_imports(sources: list[str]) -> list[str]:
    """The names a notebook's cells import from torchmetrics (or 1.x's ``pytorch_lightning.metrics``), in order; a
    cell that does not parse adds none."""
    names: list[str] = []
    for source in sources:
        masked = mask_ipython(source)
        try:
            tree = ast.parse(masked[0] if masked else source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
            if module.split(".")[0] == "torchmetrics" or re.match(
                r"(pytorch_lightning|lightning\.pytorch)\.metrics", module
            ):
                names += [alias.name for alias in node.names if alias.name != "*"]  # type: ignore[attr-defined]
    return names


def _cell_source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _json_layout(text: str, data: Any) -> dict[str, Any] | None:
    """The ``json.dumps`` arguments that give back ``text`` byte for byte from ``data`` (None: no simple layout does,
    and nbformat's own writer is used)."""
    second = text.split("\n", 2)[1] if text.count("\n") >= 2 else ""
    indent = len(second) - len(second.lstrip(" ")) or None
    for ensure_ascii in (False, True):
        layout = {"indent": indent, "ensure_ascii": ensure_ascii}
        dumped = json.dumps(data, **layout)  # type: ignore[arg-type]
        if dumped == text.rstrip("\n") and text[len(dumped) :] in ("", "\n"):
            return {**layout, "end": text[len(dumped) :]}
    return None


def upgrade_notebook(text: str) -> NotebookResult:
    """Upgrade every code cell of a notebook (the file's text).

    Args:
        text: an ``.ipynb`` file's content (nbformat 4).

    Returns:
        The rewritten file (identical when no cell changed), the cells that changed or need a person, the cells that
        do not parse and those the tool failed on (each left as it was).

    Raises:
        NotebookError: the text is not JSON, or not a valid nbformat 4 notebook (left as it is, like a file that does
            not parse).
        UpgradeError: the rewritten notebook would not validate (a bug of the tool).
        MissingDependencyError: nbformat (the ``upgrade`` extra) is not installed.

    Example::

        result = upgrade_notebook(Path("train.ipynb").read_text())
    """
    import libcst as cst

    from lightning_mgpu.utilities.imports import require

    nbformat = require("nbformat", "lightning-mgpu upgrade on a notebook")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise NotebookError(f"not JSON (line {err.lineno}: {err.msg})") from err
    if not isinstance(data, dict) or data.get("nbformat") != 4 or not isinstance(data.get("cells"), list):
        raise NotebookError("not an nbformat 4 notebook (open and save it in Jupyter first)")
    try:
        nbformat.validate(nbformat.from_dict(data))  # on a copy: validate may repair what it checks
    except nbformat.ValidationError as err:
        raise NotebookError(f"not a valid notebook ({err.message})") from err
    cells = data["cells"]
    code_cells = [(i, c) for i, c in enumerate(cells, start=1) if isinstance(c, dict) and c.get("cell_type") == "code"]
    namespace, aliases = notebook_context("\n".join(_cell_source(c) for _, c in code_cells))
    metric_names = metric_imports([_cell_source(c) for _, c in code_cells])
    submodules = submodule_imports([_cell_source(c) for _, c in code_cells])
    # Which module-level trainers' tuner flags no cell could run: read over every cell at once (a trainer built in
    # one cell may be tuned in another), from the cells as they are converted (IPython lines masked).
    joined = [mask_ipython(_cell_source(c)) for _, c in code_cells if python_file_cell(_cell_source(c)) is None]
    try:
        whole = cst.parse_module("\n".join(m[0] for m in joined if m))
        notebook_unused = notebook_unused_trainers(whole)
        # t = pl.Trainer(...) in one cell makes t.root_gpu in another a Trainer's (trainer_owners.py).
        trainers = notebook_trainers(whole)
    except cst.ParserSyntaxError:
        notebook_unused = frozenset()  # a cell that does not parse may tune any trainer
        trainers = frozenset()  # and the cells' names are read cell by cell
    result = NotebookResult(text)
    changed = False
    renamed: dict[str, tuple[str, str, dict[str, str]]] = {}  # what earlier cells' imports renamed (DDPPlugin)
    for index, cell in code_cells:
        before = _cell_source(cell)
        file_cell = python_file_cell(before)
        # A Python file the cell writes is a module of its own: its imports, not the notebook's, say what it names.
        masked = (
            (file_cell[1], [])
            if file_cell is not None
            else mask_ipython(before)
            if "__lightning_mgpu_ipython_" not in before
            else None
        )
        if masked is None or not before.strip():
            continue
        source, originals = masked
        try:
            upgraded = (
                upgrade_source(source)
                if file_cell is not None
                else upgrade_source(
                    source,
                    namespace=namespace,
                    aliases=aliases,
                    metric_names=metric_names,
                    renamed=renamed,
                    notebook_unused=notebook_unused,
                    submodules=submodules,
                    notebook_trainers=trainers,
                )
            )
        except cst.ParserSyntaxError as err:
            result.unparsable[index] = syntax_error(source, err)
            continue
        except Exception as err:  # noqa: BLE001  (one cell the tool fails on leaves the others to convert)
            log.debug("upgrade failed on cell %s", index, exc_info=True)
            result.failed[index] = f"{type(err).__name__}: {err}"
            continue
        if file_cell is None:
            renamed.update(upgraded.renamed)
        after = unmask_ipython(upgraded.source, originals) if file_cell is None else file_cell[0] + upgraded.source
        magic = before.splitlines(keepends=True)[0] if before.startswith("%%") else ""
        if magic and not after.startswith(magic):  # a comment the rewrite put above it: a cell magic stays first
            after = magic + after.replace(magic, "", 1)
        shift = 0 if file_cell is None else 1  # a written file's line 1 is the cell's line 2
        findings = [
            Finding(f.line + shift if f.line else 0, f.message, todo=f.todo, note=f.note, rule=f.rule, cell=index)
            for f in upgraded.findings
        ]
        if after == before and not findings:
            continue
        result.cells.append(CellResult(index, before, after, findings))
        if after != before:
            changed = True
            cell["source"] = after.splitlines(keepends=True) if isinstance(cell.get("source"), list) else after
    if not changed:
        return result
    layout = _json_layout(text, json.loads(text))
    node = nbformat.from_dict(data)
    try:
        nbformat.validate(node)
    except nbformat.ValidationError as err:
        raise UpgradeError(f"the rewritten notebook does not validate ({err.message})") from err
    if layout is None:
        result.text = nbformat.writes(node, version=nbformat.NO_CONVERT)
    else:
        end = layout.pop("end")
        result.text = json.dumps(data, **layout) + end
    return result
