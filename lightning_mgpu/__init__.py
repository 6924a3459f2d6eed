"""lightning_mgpu: multi-GPU strategies, callbacks, monitoring and data tools for PyTorch Lightning 2.x.

Importing the package registers the strategy names ``dp``, ``ddp2``, ``horovod``, ``sharded``,
``sharded_spawn``, ``ddp_sharded``, ``ddp_sharded_spawn`` (and their variants) in Lightning's ``StrategyRegistry``,
so ``Trainer(strategy="dp")`` works. Lightning's own ``ddp`` and ``ddp_spawn`` are untouched. The registration
needs Lightning itself, seconds of import that the bundle's command line and its data tools do not need: it happens
now if ``lightning.pytorch`` is imported already, and otherwise the moment it is, which is always before a
``Trainer`` can be built. Importing any of the bundle's strategies registers them too.

Both Lightning distributions are served: with ``pytorch_lightning`` installed, ``lightning_mgpu.pl`` is the bundle for
it (its classes subclass ``pytorch_lightning``'s), loaded when ``pytorch_lightning`` is imported, before or after this
package, and the names are registered in its registry too (``lightning_mgpu/utilities/namespaces.py``). With
``pytorch_lightning`` alone installed, this package's names are the ``pytorch_lightning`` ones.

A ``lightning`` or ``pytorch-lightning`` older than 2.6.6 makes the import warn once
(:class:`~lightning_mgpu.security.advisories.SecurityAdvisoryWarning`, CVE-2026-58659): its ``load_from_checkpoint``
runs what a checkpoint names.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from lightning_mgpu.utilities.deprecation import install as install_moved_modules
from lightning_mgpu.utilities.namespaces import (
    after_import,
    enable_twin,
    is_installed,
    track_bundle_imports,
    when_bundle_imported,
)

try:  # pyproject.toml is the one place the version is written
    __version__ = version("lightning_mgpu")
except PackageNotFoundError:  # a source checkout on PYTHONPATH, not installed
    __version__ = "0+unknown"

#: The names this package exports from its strategies (imported on first use, see ``__getattr__``).
_STRATEGY_EXPORTS = (
    "DDP2Strategy",
    "DataParallelStrategy",
    "FSDP2Strategy",
    "HorovodStrategy",
    "ShardedStrategy",
    "ZeroStrategy",
    "register_bundle_strategies",
)

if __name__ == "lightning_mgpu":
    if not (is_installed("lightning") or is_installed("pytorch_lightning")):
        raise ImportError(
            "lightning_mgpu needs PyTorch Lightning 2.5.1 or newer, and neither `lightning` nor `pytorch_lightning` is"
            " installed: from a clone, pip install -e '.[lightning]' (or -e '.[pytorch-lightning]' for code that"
            " imports pytorch_lightning); from the index once published, 'lightning_mgpu[lightning]' or"
            " 'lightning_mgpu[pytorch-lightning]'."
        )

    # A Lightning whose load_from_checkpoint runs what a checkpoint names (CVE-2026-58659) is said once, here, where
    # every user passes: read from the installed versions, without importing Lightning (SECURITY.md).
    from lightning_mgpu.security.advisories import warn_if_lightning_affected

    warn_if_lightning_affected()

    def _register() -> None:
        # Importing the strategies registers them (lightning_mgpu/strategies/__init__.py, last line). Lightning may
        # be imported from inside one of the bundle's own modules: the strategies then wait until it has finished.
        when_bundle_imported(lambda: importlib.import_module("lightning_mgpu.strategies"))

    track_bundle_imports()
    install_moved_modules()  # the module paths that moved keep working, with a DeprecationWarning (CHANGELOG.md)
    if is_installed("lightning"):
        after_import("lightning.pytorch", _register)
    enable_twin()  # pytorch_lightning's twin, now or as soon as pytorch_lightning is imported

    def __getattr__(name: str) -> Any:
        """``lightning_mgpu.DataParallelStrategy`` and friends, imported on first use (with ``pytorch_lightning``
        alone installed, the twin's)."""
        if name in _STRATEGY_EXPORTS:
            home = "lightning_mgpu.strategies" if is_installed("lightning") else "lightning_mgpu.pl"
            return getattr(importlib.import_module(home), name)
        raise AttributeError(f"module 'lightning_mgpu' has no attribute {name!r}")

else:
    # The pytorch_lightning twin (this file, loaded as lightning_mgpu.pl once pytorch_lightning is imported).
    from lightning_mgpu.strategies import (
        DataParallelStrategy,
        DDP2Strategy,
        FSDP2Strategy,
        HorovodStrategy,
        ShardedStrategy,
        ZeroStrategy,
        register_bundle_strategies,
    )

    register_bundle_strategies()

__all__ = [
    "DDP2Strategy",
    "DataParallelStrategy",
    "FSDP2Strategy",
    "HorovodStrategy",
    "ShardedStrategy",
    "ZeroStrategy",
    "__version__",
    "register_bundle_strategies",
]
