"""The package's shape: no import circles, imports run one way, no private name crosses modules, old private paths
are gone.

Every ``import`` and ``from ... import`` in ``lightning_mgpu/`` is read with ``ast`` (lazy, function-level
imports included: a lazy import that closes a loop is still a loop a reader has to untangle).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import lightning_mgpu

ROOT = Path(lightning_mgpu.__file__).parent
PKG = "lightning_mgpu"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(name: str) -> str:
    """The module an imported name lives in: the longest prefix that is a module of the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, typing_only_too: bool = False) -> set[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    # Imports under `if TYPE_CHECKING:` never run: no dependency for the floors, but a reader still follows them.
    typing_only = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for child in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing_only_too:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            # `from pkg import sub` imports the submodule; `from pkg import name` takes a name from pkg itself.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            if name == PKG or name.startswith(PKG + "."):
                target = _resolve(name)
                if target and target != module:
                    found.add(target)
    return found


GRAPH = {module: _imports(module) for module in MODULES}
#: the same graph with the imports under ``if TYPE_CHECKING:`` (a circle through an annotation is still one to untangle)
READER_GRAPH = {module: _imports(module, typing_only_too=True) for module in MODULES}


def _cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    graph = GRAPH if graph is None else graph
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    # Guards the test itself: a parser that found nothing would pass every rule below.
    assert "lightning_mgpu.strategies.registry" in GRAPH["lightning_mgpu.strategies"]
    assert "lightning_mgpu.utilities.imports" in GRAPH["lightning_mgpu.strategies.sharded.strategy"]
    assert len(MODULES) > 40


def test_no_import_circles_not_even_through_annotations() -> None:
    assert _cycles(READER_GRAPH) == []


def test_cycle_detection_finds_a_planted_circle(monkeypatch: pytest.MonkeyPatch) -> None:
    # cli imports utilities.imports; make utilities.imports import cli back.
    assert "lightning_mgpu.utilities.imports" in GRAPH["lightning_mgpu.cli"]
    monkeypatch.setitem(GRAPH, "lightning_mgpu.utilities.imports", {"lightning_mgpu.cli"})
    assert any({"lightning_mgpu.utilities.imports", "lightning_mgpu.cli"} <= set(c) for c in _cycles())


def _importers_of(prefix: str) -> dict[str, set[str]]:
    return {m: {t for t in targets if t == prefix or t.startswith(prefix + ".")} for m, targets in GRAPH.items()}


# (who, must not import): the one-way direction of the layout
# Glue to the outside and command-line tools: nothing in the library uses them (only cli reaches upgrade and tools).
_ABOVE_ALL = [
    "lightning_mgpu.launchers",
    "lightning_mgpu.cli",
    "lightning_mgpu.upgrade",
    "lightning_mgpu.tools",
    "lightning_mgpu.testing",  # what tests, benchmarks and users check modules with; the library never needs it
]
_LIBRARY = [
    "lightning_mgpu.strategies",
    "lightning_mgpu.plugins",
    "lightning_mgpu.callbacks",
    "lightning_mgpu.monitoring",
    "lightning_mgpu.loggers",
    "lightning_mgpu.data",
    "lightning_mgpu.dashboard",
    "lightning_mgpu.demos",
    "lightning_mgpu.launchers",
]
#: every top-level home of the package (the security rule lists those it may not import)
_FLOORS = sorted({".".join(m.split(".")[:2]) for m in MODULES if m.count(".") >= 1})
RULES = [
    ("lightning_mgpu.utilities", ["lightning_mgpu"]),  # the bottom floor imports nothing above it
    # Trust (advisories, the check at every load) stands on the bottom floor: the checkpoint formats ask it.
    (
        "lightning_mgpu.security",
        [m for m in _FLOORS if m not in ("lightning_mgpu.utilities", "lightning_mgpu.security")],
    ),
    # The formats stand on the bottom floor and security only: every strategy, callback and tool reads and writes
    # through them.
    ("lightning_mgpu.checkpoint", [*_LIBRARY, *_ABOVE_ALL]),
    # The plugins the strategies train with (Lightning's plugins/precision) know no strategy.
    (
        "lightning_mgpu.plugins",
        [
            "lightning_mgpu.strategies",
            "lightning_mgpu.dashboard",
            "lightning_mgpu.callbacks",
            "lightning_mgpu.monitoring",
            "lightning_mgpu.loggers",
            "lightning_mgpu.data",
            "lightning_mgpu.demos",
            *_ABOVE_ALL,
        ],
    ),
    (
        "lightning_mgpu.strategies",
        [
            "lightning_mgpu.dashboard",
            "lightning_mgpu.callbacks",
            "lightning_mgpu.monitoring",
            "lightning_mgpu.loggers",
            "lightning_mgpu.demos",
            *_ABOVE_ALL,
        ],
    ),
    (
        "lightning_mgpu.callbacks",
        [
            "lightning_mgpu.dashboard",
            "lightning_mgpu.strategies",
            "lightning_mgpu.loggers",
            "lightning_mgpu.demos",
            *_ABOVE_ALL,
        ],
    ),
    (
        "lightning_mgpu.monitoring",
        [
            "lightning_mgpu.dashboard",
            "lightning_mgpu.loggers",
            "lightning_mgpu.strategies",
            "lightning_mgpu.callbacks",
            "lightning_mgpu.demos",
            *_ABOVE_ALL,
        ],
    ),
    (
        "lightning_mgpu.loggers",
        ["lightning_mgpu.dashboard", "lightning_mgpu.strategies", "lightning_mgpu.demos", *_ABOVE_ALL],
    ),
    (
        "lightning_mgpu.data",
        [
            "lightning_mgpu.dashboard",
            "lightning_mgpu.strategies",
            "lightning_mgpu.monitoring",
            "lightning_mgpu.demos",
            *_ABOVE_ALL,
        ],
    ),
    ("lightning_mgpu.dashboard", ["lightning_mgpu.strategies", "lightning_mgpu.callbacks", *_ABOVE_ALL]),
    # The launcher glue maps names onto strategies; it knows no callbacks, loggers, data or demos.
    (
        "lightning_mgpu.launchers",
        [
            "lightning_mgpu.callbacks",
            "lightning_mgpu.monitoring",
            "lightning_mgpu.loggers",
            "lightning_mgpu.data",
            "lightning_mgpu.dashboard",
            "lightning_mgpu.demos",
            "lightning_mgpu.cli",
        ],
    ),
    # The testing aids drive strategies and callbacks the way a user does; nothing above them.
    (
        "lightning_mgpu.testing",
        [
            "lightning_mgpu.dashboard",
            "lightning_mgpu.loggers",
            "lightning_mgpu.data",
            "lightning_mgpu.demos",
            "lightning_mgpu.launchers",
            "lightning_mgpu.cli",
            "lightning_mgpu.upgrade",
            "lightning_mgpu.tools",
        ],
    ),
    # The tools stand beside the library: they read source files or build wheels, and import none of it.
    ("lightning_mgpu.upgrade", [*_LIBRARY, *_ABOVE_ALL]),
    ("lightning_mgpu.tools", [*_LIBRARY, *_ABOVE_ALL]),
]


@pytest.mark.parametrize(("who", "forbidden"), RULES, ids=[r[0].rpartition(".")[2] for r in RULES])
def test_imports_run_one_way(who: str, forbidden: list[str]) -> None:
    bad = []
    for module, targets in GRAPH.items():
        if not (module == who or module.startswith(who + ".")):
            continue
        for target in targets:
            inside = target == who or target.startswith(who + ".")
            if not inside and any(target == f or target.startswith(f + ".") for f in forbidden):
                bad.append(f"{module} -> {target}")
    assert bad == []


def test_strategy_packages_never_import_the_registry() -> None:
    registry = "lightning_mgpu.strategies.registry"
    importers = {m for m, targets in GRAPH.items() if registry in targets}
    assert importers <= {"lightning_mgpu.strategies", "lightning_mgpu.cli"}, importers


def test_old_private_paths_are_gone() -> None:
    old = [
        "strategies/_dp_engine.py",
        "strategies/_horovod_runtime.py",
        "strategies/_sharded_fairscale.py",
        "callbacks/gpu_monitor.py",
        "utilities/dashboard.py",
        "utilities/samplers.py",
        "utilities/info.py",
        "models",
        "strategies/horovod/build.py",
        # the re-cut along engines: FSDP2 has a package of its own, the emulators are testing aids, one horovod launcher
        "strategies/sharded/fsdp2.py",
        "strategies/sharded/backend.py",
        "strategies/dp/emulation.py",
        "strategies/ddp2/emulation.py",
        "strategies/horovod/launcher.py",
        # checkpoint formats have one home, lightning_mgpu/checkpoint/
        "utilities/checkpoint.py",
        "utilities/sharded_checkpoint.py",
        "tools/convert_checkpoint.py",
        # precision plugins live where Lightning keeps them, lightning_mgpu/plugins/precision/
        "strategies/_shard_precision.py",
        "strategies/sharded/precision.py",
        "strategies/fsdp2/precision.py",
        # optimizer plumbing and the namespace guard are not strategies: utilities/optimizers.py, namespace_guard.py
        "strategies/_optim.py",
        "strategies/mixed_namespaces.py",
    ]
    assert [p for p in old if (ROOT / p).exists()] == []


def test_public_paths_users_import_still_work() -> None:
    from lightning_mgpu.callbacks import GPUUtilizationMonitor
    from lightning_mgpu.checkpoint import AtomicCheckpointIO, load_state_dict, read_checkpoint  # noqa: F401
    from lightning_mgpu.monitoring import GPUUtilizationMonitor as Home
    from lightning_mgpu.plugins import FSDP2MixedPrecision, ShardAwareGradScaler, ShardedMixedPrecision  # noqa: F401
    from lightning_mgpu.strategies import (  # noqa: F401
        DataParallelStrategy,
        FSDP2Strategy,
        HorovodStrategy,
        ShardedStrategy,
        ZeroStrategy,
    )
    from lightning_mgpu.testing import EmulatedDataParallelStrategy, ParityModule, quiet_trainer  # noqa: F401

    assert GPUUtilizationMonitor is Home


def test_an_import_only_for_annotations_still_counts_for_circles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Guards READER_GRAPH: a module whose only import of another is under `if TYPE_CHECKING:`.
    source = tmp_path / "annotated.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lightning_mgpu.cli import main\n")
    monkeypatch.setitem(MODULES, "lightning_mgpu.annotated", source)
    assert _imports("lightning_mgpu.annotated") == set()
    assert _imports("lightning_mgpu.annotated", typing_only_too=True) == {"lightning_mgpu.cli"}


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_benchmarks_never_import_tests() -> None:
    # What both need lives in lightning_mgpu/testing/; the tests may import the benchmarks they test, not the reverse.
    benchmarks = ROOT.parent / "benchmarks"
    scripts = [p for p in benchmarks.rglob("*.py") if "results" not in p.relative_to(benchmarks).parts]
    assert len(scripts) > 10
    assert [str(p.relative_to(benchmarks)) for p in scripts if "tests" in _top_level_imports(p)] == []


def _private_imports() -> list[str]:
    """``from lightning_mgpu.X import _name`` in the package, where X is not the importer's own package."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            if node.module.startswith("lightning_mgpu") and node.module != package:
                found += [
                    f"{module}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    """A name a module keeps private stays its own; a package's private modules serve that package only."""
    assert _private_imports() == []


def test_the_private_import_check_finds_a_planted_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "lightning_mgpu"
    (package / "dashboard").mkdir(parents=True)
    (package / "dashboard" / "compare.py").write_text("from lightning_mgpu.dashboard.page import _CSS\n")
    (package / "data").mkdir()
    (package / "data" / "backends.py").write_text("from lightning_mgpu.data import _worker\n")  # its own package's
    monkeypatch.setattr(sys.modules[__name__], "ROOT", package)
    assert _private_imports() == ["lightning_mgpu.dashboard.compare: from lightning_mgpu.dashboard.page import _CSS"]
