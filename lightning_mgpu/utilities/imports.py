"""Lazy access to optional dependencies.

Each optional package is imported only where it is used, so ``import lightning_mgpu`` stays
cheap and works with none of them installed. A missing package raises an error that names the
extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from functools import lru_cache
from types import ModuleType
from typing import Any


def _hint(requirement: str, extra: str) -> str:
    """The install line for an extra's package: the package itself (works anywhere), and the extra from a clone (the
    ``lightning_mgpu[...]`` form works once the bundle is published on an index)."""
    return f"pip install '{requirement}' (the [{extra}] extra; from a clone: pip install -e '.[{extra}]')"


# package import name -> (extra, install hint)
_EXTRAS: dict[str, tuple[str, str]] = {
    "horovod": (
        "horovod",
        "python -m lightning_mgpu build-horovod  (horovod 0.28.1 needs a C++17 patch to build against torch>=2.1)",
    ),
    "fairscale": ("sharded", _hint("fairscale==0.4.13", "sharded")),
    "ray": ("ray", _hint("ray[train]>=2.54", "ray")),
    "neptune": ("neptune", _hint("neptune>=1.10,<2", "neptune")),
    "mlflow": ("mlflow", _hint("mlflow-skinny>=2.8", "mlflow")),
    "wandb": ("wandb", _hint("wandb>=0.19.10", "wandb")),
    "pynvml": ("gpu", _hint("nvidia-ml-py>=12", "gpu")),
    "matplotlib": ("dashboard", _hint("matplotlib>=3.7", "dashboard")),
    "plotly": ("dashboard", _hint("plotly>=5.20", "dashboard")),
    "tensorboard": ("dashboard", _hint("tensorboard>=2.14", "dashboard")),
    "pyarrow": ("dashboard", _hint("pyarrow>=14", "dashboard")),
    "psutil": ("monitor", _hint("psutil>=5.9", "monitor")),
    "ray.train": ("ray", _hint("ray[train]>=2.54", "ray")),
    "libcst": ("upgrade", _hint("libcst>=1.1", "upgrade")),
    "nbformat": ("upgrade", _hint("nbformat>=5.7", "upgrade")),
    "safetensors": ("safetensors", _hint("safetensors>=0.4", "safetensors")),
}


def _extra(package: str) -> tuple[str, str]:
    """``(extra, install command)`` for ``package`` (or its top-level package); a plain pip install if unknown."""
    return _EXTRAS.get(package) or _EXTRAS.get(package.split(".")[0], (package, f"pip install {package}"))


def install_hint(package: str) -> str:
    """How to install optional ``package`` (the command, and the extra it belongs to)."""
    return _extra(package)[1]


class MissingDependencyError(ImportError):
    """Raised when a feature needs an optional package that is not installed."""


@lru_cache(maxsize=None)
def is_available(package: str) -> bool:
    """Whether ``package`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def require(package: str, feature: str) -> ModuleType:
    """Import ``package`` or raise :class:`MissingDependencyError` naming the extra to install.

    Args:
        package: the import name, e.g. ``"fairscale"``.
        feature: what needs it, used in the message, e.g. ``"strategy='sharded'"``.

    Raises:
        MissingDependencyError: the package is not installed or fails to import.

    Example::

        fairscale = require("fairscale", "strategy='sharded'")
    """
    extra, hint = _extra(package)
    try:
        return importlib.import_module(package)
    except ImportError as err:
        raise MissingDependencyError(
            f"{feature} needs `{package}`, which is not installed or failed to import ({err}). "
            f"Install the `{extra}` extra: {hint}"
        ) from err


def package_version(package: str) -> str | None:
    """Installed distribution version of ``package`` or ``None``."""
    from importlib.metadata import PackageNotFoundError, version

    dist = {"pynvml": "nvidia-ml-py"}.get(package, package)
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` that imports each name of ``exports`` (name -> submodule) on first use.

    Example::

        __getattr__ = lazy_exports(__name__, {"AtomicCheckpointIO": "io"})
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
