"""The public paths that moved keep working for a release, with a DeprecationWarning naming the new path at the
user's own line; the bundle's own code never uses them."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

from lightning_mgpu.utilities import deprecation
from lightning_mgpu.utilities.deprecation import MOVED_MODULES, MOVED_NAMES

ROOT = Path(__file__).resolve().parents[3]


def _run_as_user(code: str) -> tuple[dict, list[warnings.WarningMessage]]:
    namespace: dict = {"__name__": "user_script"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, "user_script.py", "exec"), namespace)
    return namespace, [w for w in caught if issubclass(w.category, DeprecationWarning) and "moved to" in str(w.message)]


def _forget(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """A fresh import of ``module`` (and its old parent package) in this test."""
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    parent, _, child = module.rpartition(".")
    if parent in sys.modules and child in vars(sys.modules[parent]):
        monkeypatch.delattr(sys.modules[parent], child)
    if parent in MOVED_MODULES:
        _forget(monkeypatch, parent)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_an_old_module_warns_at_the_import_and_holds_the_new_modules_names(old: str, new: str, monkeypatch) -> None:
    _forget(monkeypatch, old)
    namespace, said = _run_as_user(f"import {old} as old_module")
    assert [str(w.message) for w in said][-1].startswith(f"{old} moved to {new}: import it from there")
    assert {(w.filename, w.lineno) for w in said} == {("user_script.py", 1)}
    target = importlib.import_module(new)
    public = [n for n in getattr(target, "__all__", vars(target)) if not n.startswith("_")]
    assert public and all(getattr(namespace["old_module"], n) is getattr(target, n) for n in public)


def test_the_module_the_issue_names(monkeypatch) -> None:
    _forget(monkeypatch, "lightning_mgpu.utilities.checkpoint")
    namespace, said = _run_as_user(
        "from lightning_mgpu.utilities.checkpoint import AtomicCheckpointIO, load_state_dict, read_checkpoint\n"
        "import lightning_mgpu.utilities.checkpoint\n"  # a second import says nothing more
    )
    import lightning_mgpu.checkpoint as home

    assert namespace["load_state_dict"] is home.load_state_dict and namespace["read_checkpoint"] is home.read_checkpoint
    assert namespace["AtomicCheckpointIO"] is home.AtomicCheckpointIO
    assert [str(w.message) for w in said] == [
        "lightning_mgpu.utilities.checkpoint moved to lightning_mgpu.checkpoint.io: import it from there"
        f" (lightning_mgpu.utilities.checkpoint goes in lightning_mgpu {deprecation.REMOVED_IN})."
    ]


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_NAMES.items()), ids=[f"{m}.{n}" for m, n in sorted(MOVED_NAMES)])
def test_a_moved_name_warns_once_per_use_and_is_the_same_object(old: tuple[str, str], new: str, monkeypatch) -> None:
    module, name = old
    if module in MOVED_MODULES:
        _forget(monkeypatch, module)
    namespace, said = _run_as_user(f"from {module} import {name} as value")
    home, _, attr = new.rpartition(".")
    assert namespace["value"] is getattr(importlib.import_module(home), attr)
    mine = [w for w in said if str(w.message).startswith(f"{module}.{name} moved to {new}: ")]
    assert len(mine) == 1 and mine[0].filename == "user_script.py", [str(w.message) for w in said]


def test_a_name_that_never_was_is_still_an_attribute_error() -> None:
    import lightning_mgpu.strategies.dp as dp

    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        dp.nonexistent  # noqa: B018


def _code_files() -> list[Path]:
    skip = {Path(__file__).resolve(), (ROOT / "lightning_mgpu" / "utilities" / "deprecation.py").resolve()}
    files = [*(ROOT / "lightning_mgpu").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]
    files += [p for p in (ROOT / "benchmarks").rglob("*.py") if "results" not in p.parts]
    files += [p for p in (ROOT / "tests").rglob("*.py") if "upgrade_corpus" not in p.parts]
    return [p for p in files if p.resolve() not in skip]


def test_the_bundles_own_code_never_uses_an_old_path() -> None:
    old_paths = set(MOVED_MODULES) | {f"{m}.{n}" for m, n in MOVED_NAMES}
    pattern = re.compile("|".join(re.escape(p) + r"\b" for p in sorted(old_paths, key=len, reverse=True)))
    offenders = []
    files = _code_files()
    assert len(files) > 100
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            used: list[str] = []
            if isinstance(node, ast.Import):
                used = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                used = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and "test_public_names" not in path.name
            ):
                used = pattern.findall(node.value)  # importlib.import_module("...") and friends
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}: {u}" for u in used if u in old_paths]
    assert offenders == []
