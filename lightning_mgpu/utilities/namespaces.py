"""The bundle for both Lightning distributions in one environment: ``lightning.pytorch`` and ``pytorch_lightning``.

``pytorch_lightning`` is Lightning's generated mirror of ``lightning.pytorch``: the same code with its imports and
strings rewritten, so its ``Trainer`` accepts only its own ``Strategy``, ``Callback`` and ``LightningModule`` classes
and has its own ``StrategyRegistry``. The bundle does what Lightning does, at import time instead of at build time:
``lightning_mgpu.pl`` is the bundle loaded from the same source files with ``lightning.pytorch`` ->
``pytorch_lightning`` and ``lightning.fabric`` -> ``lightning_fabric``. There is one source of truth and no copy
on disk.

Only modules that reach Lightning get a twin (``lightning_mgpu.strategies.dp.strategy`` ->
``lightning_mgpu.pl.strategies.dp.strategy``); the others (``data.fingerprint``, ``utilities.namespaces``, ...) are
shared, so their module state exists once. A package has a twin when any module under it does. With
``pytorch_lightning`` alone installed, every module is the twin's own (the originals' packages need ``lightning``).

Example::

    import pytorch_lightning as pl
    import lightning_mgpu  # registers "dp", "horovod", "ddp_sharded", ... in both registries

    pl.Trainer(strategy="dp")                                   # a pytorch_lightning strategy
    from lightning_mgpu.pl import DataParallelStrategy          # the twin class, explicitly
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType

PACKAGE = "lightning_mgpu"
TWIN = f"{PACKAGE}.pl"
ROOT = Path(__file__).resolve().parents[1]

#: What the twin's source gets instead, as Lightning's own mirror build rewrites it.
_REWRITES = (
    (re.compile(r"\blightning\.pytorch\b"), "pytorch_lightning"),
    (re.compile(r"\blightning\.fabric\b"), "lightning_fabric"),
)
_LIGHTNING = re.compile(r"^\s*(?:from|import)\s+lightning\.(?:pytorch|fabric)\b", re.MULTILINE)


class MixedLightningNamespacesError(TypeError):
    """A ``lightning.pytorch`` object was handed to a ``pytorch_lightning`` Trainer, or the reverse (raised by
    ``lightning_mgpu.utilities.namespace_guard``; defined here so that both namespaces raise the same class)."""


def _module_path(name: str) -> Path | None:
    """The source file of bundle module ``name`` (``lightning_mgpu.x.y``), or None."""
    rel = Path(*name.split(".")[1:])
    for candidate in (ROOT / rel / "__init__.py", ROOT / rel.with_suffix(".py") if rel.parts else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _bundle_imports(name: str, path: Path) -> set[str]:
    """Bundle modules that module ``name`` imports (function-level imports included: they run too)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for imported in names:
            while imported.startswith(PACKAGE) and _module_path(imported) is None:
                imported = imported.rpartition(".")[0]
            if imported.startswith(PACKAGE) and imported != name:
                found.add(imported)
    return found


def _is_twin(name: str) -> bool:
    """Whether ``name`` is the twin package or a module under it (``lightning_mgpu.plugins`` is not)."""
    return name == TWIN or name.startswith(TWIN + ".")


@cache
def twinned_modules() -> frozenset[str]:
    """Bundle modules that need a ``pytorch_lightning`` twin: those that import Lightning, those that import one of
    them, and every package above one of them."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not _is_twin(name):
            modules[name] = path
    direct = {name for name, path in modules.items() if _LIGHTNING.search(path.read_text())}
    imports = {name: _bundle_imports(name, path) for name, path in modules.items()}
    twinned = set(direct)
    changed = True
    while changed:
        changed = False
        for name, targets in imports.items():
            if name not in twinned and targets & twinned:
                twinned.add(name)
                changed = True
    for name in list(twinned):
        while "." in name:
            name = name.rpartition(".")[0]
            twinned.add(name)
    return frozenset(twinned)


def original_name(name: str) -> str:
    """``lightning_mgpu.pl.x`` -> ``lightning_mgpu.x`` (``lightning_mgpu.pl`` -> ``lightning_mgpu``)."""
    return PACKAGE + name[len(TWIN) :]


_FROM_BUNDLE = re.compile(rf"^(\s*from\s+){PACKAGE}\b", re.MULTILINE)
_IMPORT_ROOT = re.compile(rf"^(\s*import\s+){PACKAGE}(?=\s*(?:#|$))", re.MULTILINE)


def twin_source(source: str) -> str:
    """A bundle module's source rewritten for ``pytorch_lightning``: Lightning's namespaces everywhere (as Lightning's
    mirror build does), and its imports of the bundle pointing at ``lightning_mgpu.pl`` (strings and messages keep
    their names)."""
    for pattern, replacement in _REWRITES:
        source = pattern.sub(replacement, source)
    source = _FROM_BUNDLE.sub(rf"\g<1>{TWIN}", source)
    return _IMPORT_ROOT.sub(rf"\g<1>{TWIN} as {PACKAGE}", source)


class _TwinLoader(importlib.abc.Loader):
    """Executes a bundle module's rewritten source as its twin."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        code = compile(twin_source(self.path.read_text()), str(self.path), "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102  (the bundle's own source, rewritten as Lightning's mirror is)


class _AliasLoader(importlib.abc.Loader):
    """A module that needs no twin: ``lightning_mgpu.pl.x`` is ``lightning_mgpu.x`` itself, so its state exists once."""

    def __init__(self, original: str) -> None:
        self.original = original
        self.original_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.original)
        self.original_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just pointed the module's __spec__ at the alias; the module is still the original.
        module.__spec__ = self.original_spec


class TwinFinder(importlib.abc.MetaPathFinder):
    """Finds ``lightning_mgpu.pl.*``: a twin of each bundle module that reaches Lightning, the module itself
    otherwise."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not _is_twin(fullname):
            return None
        original = original_name(fullname)
        source = _module_path(original)
        if source is None:
            return None
        # A shared module is the original itself. Without lightning the originals' packages cannot be imported, and
        # nothing else uses them: every module is then loaded as the twin's own.
        if original not in twinned_modules() and is_installed("lightning"):
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(original))
        is_package = source.name == "__init__.py"
        return importlib.util.spec_from_file_location(
            fullname, source, loader=_TwinLoader(source), submodule_search_locations=[] if is_package else None
        )


def is_installed(distribution_module: str) -> bool:
    """Whether ``lightning`` or ``pytorch_lightning`` can be imported (without importing it)."""
    if distribution_module in sys.modules:
        return sys.modules[distribution_module] is not None  # None: import blocked on purpose
    try:
        return importlib.util.find_spec(distribution_module) is not None
    except (ImportError, ValueError):
        return False


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback`` right after module ``fullname`` finishes importing (once): the bundle's names are registered
    with Lightning when Lightning is imported, so ``import lightning_mgpu`` itself stays light."""

    def __init__(self, fullname: str, callback: Callable[[], object]) -> None:
        self.fullname, self.callback = fullname, callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.fullname:
            return None
        sys.meta_path.remove(self)  # once, and so that the lookup below finds the real module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module
        callback = self.callback

        def exec_then_callback(module: ModuleType) -> None:
            loader_exec(module)
            assert spec.loader is not None
            del spec.loader.exec_module  # back to the loader's own method
            callback()

        spec.loader.exec_module = exec_then_callback  # type: ignore[method-assign]
        return spec


def after_import(fullname: str, callback: Callable[[], object]) -> None:
    """Run ``callback`` now if ``fullname`` is imported, else right after it is (idempotent per module name)."""
    if fullname in sys.modules:
        callback()
    elif not any(isinstance(f, _AfterImport) and f.fullname == fullname for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(fullname, callback))


class _BundleImports(importlib.abc.MetaPathFinder):
    """Counts the bundle's own modules that are being imported, so that work which imports many of them (registering
    the strategies) waits until none is half-done: run from inside ``lightning_mgpu.checkpoint.io``'s import of
    Lightning, it would import that very module again, half-initialised."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[Callable[[], object]] = []
        self._finding = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if self._finding or not fullname.startswith(PACKAGE + ".") or _is_twin(fullname):
            return None
        self._finding = True  # the lookup below goes through sys.meta_path again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def counted(module: ModuleType) -> None:
            self.depth += 1
            try:
                loader_exec(module)
            finally:
                assert spec.loader is not None
                del spec.loader.exec_module  # back to the loader's own method
                self.depth -= 1
            while self.depth == 0 and self.pending:
                self.pending.pop(0)()

        spec.loader.exec_module = counted  # type: ignore[method-assign]
        return spec


_BUNDLE_IMPORTS = _BundleImports()


def when_bundle_imported(callback: Callable[[], object]) -> None:
    """Run ``callback`` now, or, while one of the bundle's modules is being imported, as soon as the outermost one
    has finished."""
    if _BUNDLE_IMPORTS not in sys.meta_path:
        sys.meta_path.insert(0, _BUNDLE_IMPORTS)
    if _BUNDLE_IMPORTS.depth:
        _BUNDLE_IMPORTS.pending.append(callback)
    else:
        callback()


def track_bundle_imports() -> None:
    """Start counting the bundle's module imports (the package's ``__init__`` calls it first)."""
    if _BUNDLE_IMPORTS not in sys.meta_path:
        sys.meta_path.insert(0, _BUNDLE_IMPORTS)


def import_twin() -> ModuleType | None:
    """Import ``lightning_mgpu.pl`` (which registers the bundle's names in ``pytorch_lightning``'s registry).

    A failure never breaks the user's ``import pytorch_lightning``: it becomes a warning naming the cause.
    """
    try:
        return importlib.import_module(TWIN)
    except Exception as err:  # noqa: BLE001  (any failure of the twin: the user's own import must go on)
        import warnings

        warnings.warn(
            f"lightning_mgpu could not load its pytorch_lightning twin ({type(err).__name__}: {err}); the bundle's"
            " strategy names are not registered in pytorch_lightning. Use `lightning.pytorch` (pip install lightning),"
            " or report this with `python -m lightning_mgpu info`.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def enable_twin() -> None:
    """Make ``lightning_mgpu.pl`` importable, and load it now or as soon as ``pytorch_lightning`` is imported.

    Idempotent. Nothing happens when ``pytorch_lightning`` is not installed, and importing the bundle never imports
    ``pytorch_lightning`` by itself (a second Lightning costs seconds of import).
    """
    if not any(isinstance(finder, TwinFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, TwinFinder())
    if "pytorch_lightning" in sys.modules or is_installed("pytorch_lightning"):
        after_import("pytorch_lightning", import_twin)
