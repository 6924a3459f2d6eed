"""The public paths that moved: each old one keeps working, with a ``DeprecationWarning`` naming the new one, until
:data:`REMOVED_IN` (at least one minor release; CHANGELOG.md lists every move).

Two kinds, one table each:

- a module that moved (``lightning_mgpu.utilities.checkpoint`` -> ``lightning_mgpu.checkpoint.io``): importing the old
  path warns once and gives a module whose names are the new module's (the same objects), served by an import hook
  that ``import lightning_mgpu`` installs (:func:`install`);
- a name that left a module that still exists (``lightning_mgpu.strategies.dp.physical_device_ids``): that module's
  ``__getattr__ = moved_names(__name__)`` warns at each use and returns the object from its new home.

The new homes are imported by name, when an old path is used and not before: this bottom-floor module imports nothing
above it. The bundle's own code never uses an old path (``tests/unit/utilities/test_deprecation.py`` checks).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: the first release without the old paths below (they were deprecated in 0.2.0)
REMOVED_IN = "0.3.0"

#: old module -> the module that holds its names now
MOVED_MODULES: dict[str, str] = {
    # checkpoint formats: one home, lightning_mgpu/checkpoint/ (6bcaa90)
    "lightning_mgpu.utilities.checkpoint": "lightning_mgpu.checkpoint.io",
    "lightning_mgpu.utilities.sharded_checkpoint": "lightning_mgpu.checkpoint.sharded",
    "lightning_mgpu.tools.convert_checkpoint": "lightning_mgpu.checkpoint.convert",
    # the CPU emulators are testing aids (6bcaa90); private modules that the docs showed (a7529e2)
    "lightning_mgpu.strategies._dp_emulation": "lightning_mgpu.testing.dp",
    "lightning_mgpu.strategies._horovod_runtime": "lightning_mgpu.strategies.horovod.runtime",
    "lightning_mgpu.strategies.dp.emulation": "lightning_mgpu.testing.dp",
    "lightning_mgpu.strategies.ddp2.emulation": "lightning_mgpu.testing.ddp2",
    # tools beside the library (ee9a8d4), precision plugins where Lightning keeps them (6f60d42)
    "lightning_mgpu.strategies.horovod.build": "lightning_mgpu.tools.build_horovod",
    "lightning_mgpu.strategies.sharded.precision": "lightning_mgpu.plugins.precision.fairscale",
    "lightning_mgpu.strategies.fsdp2.precision": "lightning_mgpu.plugins.precision.fsdp2",
    # one class per sharded engine (889f4d2); the namespace guard is a utility (dfdcd7f)
    "lightning_mgpu.strategies.sharded.fsdp2": "lightning_mgpu.strategies.fsdp2.strategy",
    "lightning_mgpu.strategies.mixed_namespaces": "lightning_mgpu.utilities.namespace_guard",
    # one home per concept (a7529e2): the command line, the dashboard, monitoring, the demos
    "lightning_mgpu.utilities.info": "lightning_mgpu.cli",
    "lightning_mgpu.utilities.run_reader": "lightning_mgpu.dashboard.reader",
    "lightning_mgpu.utilities.dashboard": "lightning_mgpu.dashboard.render",
    "lightning_mgpu.callbacks.gpu_monitor": "lightning_mgpu.monitoring.callback",
    "lightning_mgpu.utilities.diagnosis": "lightning_mgpu.monitoring.diagnosis",
    "lightning_mgpu.utilities.monitor_keys": "lightning_mgpu.monitoring.keys",
    "lightning_mgpu.utilities.samplers": "lightning_mgpu.monitoring.samplers",
    "lightning_mgpu.utilities.step_timing": "lightning_mgpu.monitoring.step_timing",
    "lightning_mgpu.models": "lightning_mgpu.demos",
    "lightning_mgpu.models.classifier": "lightning_mgpu.demos.classifier",
    "lightning_mgpu.models.digits": "lightning_mgpu.demos.digits",
    "lightning_mgpu.models.digits_preprocessed": "lightning_mgpu.demos.digits_preprocessed",
    "lightning_mgpu.models.synthetic": "lightning_mgpu.demos.synthetic",
}
_PACKAGES = {"lightning_mgpu.models"}

#: (module, name) -> the name's new home, ``module.name``: names that left a module (old or still there)
MOVED_NAMES: dict[tuple[str, str], str] = {
    ("lightning_mgpu.strategies.dp", "physical_device_ids"): "lightning_mgpu.utilities.devices.physical_device_ids",
    ("lightning_mgpu.strategies.sharded", "ShardAwareGradScaler"): "lightning_mgpu.plugins.ShardAwareGradScaler",
    ("lightning_mgpu.callbacks.mixed_precision", "ShardAwareGradScaler"): "lightning_mgpu.plugins.ShardAwareGradScaler",
    **{
        ("lightning_mgpu.utilities.sharded_checkpoint", name): f"lightning_mgpu.checkpoint.keys.{name}"
        for name in ("ids_from_names", "names_from_ids", "param_groups_with_ids", "param_ids")
    },
    # the dashboard's chart model left render.py (issue 57); the other names it held are still importable there
    **{
        ("lightning_mgpu.dashboard.render", name): f"lightning_mgpu.dashboard.charts.{name}"
        for name in ("MAX_MARKERS", "Chart")
    },
    **{
        ("lightning_mgpu.strategies.sharded.fsdp2", name): f"lightning_mgpu.strategies.fsdp2.state.{name}"
        for name in (
            "full_optimizer_state",
            "load_full_optimizer_state",
            "load_sharded_checkpoint",
            "sharded_model_state",
            "sharded_optimizer_state",
        )
    },
}


def _is_machinery(filename: str) -> bool:
    """Frames between the user's code and the warning: Python's import system and the bundle's import hooks."""
    return ("importlib" in filename and "_bootstrap" in filename) or filename in _HOOK_FILES


_HOOK_FILES = {__file__, __file__.replace("deprecation.py", "namespaces.py")}


def _warn(old: str, new: str) -> None:
    """Warn at the user's line that used ``old``: the first frame outside the import machinery."""
    frame = sys._getframe(1)
    while frame.f_back is not None and _is_machinery(frame.f_code.co_filename):
        frame = frame.f_back
    warnings.warn_explicit(
        f"{old} moved to {new}: import it from there ({old} goes in lightning_mgpu {REMOVED_IN}).",
        DeprecationWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__"),
        registry=frame.f_globals.setdefault("__warningregistry__", {}),
        module_globals=frame.f_globals,
    )


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def moved_names(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves the names :data:`MOVED_NAMES` lists for ``module``, with a warning.

    Example::

        __getattr__ = moved_names(__name__)  # at the end of the module a name left
    """

    def __getattr__(name: str) -> Any:
        new = MOVED_NAMES.get((module, name))
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if not _is_machinery(sys._getframe(1).f_code.co_filename):  # `from m import n` asks twice: warn once
            _warn(f"{module}.{name}", new)
        return _resolve(new)

    return __getattr__


class _MovedModule(ModuleType):
    """An old module path: its names are those of the module it moved to (the same objects)."""

    def __getattr__(self, name: str) -> Any:
        if name == "__all__":  # `from old import *` gets the new module's names
            target = importlib.import_module(MOVED_MODULES[self.__name__])
            return getattr(target, "__all__", [n for n in vars(target) if not n.startswith("_")])
        if name.startswith("__"):
            raise AttributeError(name)
        new = MOVED_NAMES.get((self.__name__, name))
        if new is not None:
            if not _is_machinery(sys._getframe(1).f_code.co_filename):  # `from m import n` asks twice: warn once
                _warn(f"{self.__name__}.{name}", new)
            return _resolve(new)
        return getattr(importlib.import_module(MOVED_MODULES[self.__name__]), name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(importlib.import_module(MOVED_MODULES[self.__name__]))) | set(super().__dir__()))


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old module paths (after every other finder: a real module of that name would win)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname in _PACKAGES)

    def create_module(self, spec: Any) -> ModuleType:
        return _MovedModule(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        _warn(module.__name__, MOVED_MODULES[module.__name__])  # at the import statement


def install() -> None:
    """Serve the old module paths (idempotent; ``import lightning_mgpu`` calls it)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
