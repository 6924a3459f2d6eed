"""lightning_mgpu: multi-GPU strategies, callbacks, monitoring and data tools for PyTorch Lightning 2.x.

Importing the package registers the strategy names ``dp``, ``ddp2``, ``horovod``, ``sharded``,
``sharded_spawn``, ``ddp_sharded``, ``ddp_sharded_spawn`` (and their variants) in Lightning's ``StrategyRegistry``,
so ``Trainer(strategy="dp")`` works. Lightning's own ``ddp`` and ``ddp_spawn`` are untouched.

Both Lightning distributions are served: with ``pytorch_lightning`` installed, ``lightning_mgpu.pl`` is the bundle for it
(its classes subclass ``pytorch_lightning``'s), loaded when ``pytorch_lightning`` is imported, before or after this
package, and the names are registered in its registry too (``lightning_mgpu/utilities/namespaces.py``). With
``pytorch_lightning`` alone installed, this package's names are the ``pytorch_lightning`` ones.
"""

from importlib.metadata import PackageNotFoundError, version

from lightning_mgpu.utilities.namespaces import enable_twin, is_installed

if __name__ == "lightning_mgpu" and not (is_installed("lightning") or is_installed("pytorch_lightning")):
    raise ImportError(
        "lightning_mgpu needs PyTorch Lightning 2.5.1 or newer, and neither `lightning` nor `pytorch_lightning` is"
        " installed: pip install 'lightning_mgpu[lightning]' (or 'lightning_mgpu[pytorch-lightning]' for code that"
        " imports pytorch_lightning)."
    )
if __name__ == "lightning_mgpu" and not is_installed("lightning"):
    # pytorch_lightning alone: the top-level names are its twin's (this file also runs as lightning_mgpu.pl).
    enable_twin()
    from lightning_mgpu.pl import (
        DataParallelStrategy,
        DDP2Strategy,
        HorovodStrategy,
        ShardedStrategy,
        register_bundle_strategies,
    )
else:
    from lightning_mgpu.strategies import (
        DataParallelStrategy,
        DDP2Strategy,
        HorovodStrategy,
        ShardedStrategy,
        register_bundle_strategies,
    )

    register_bundle_strategies()

try:  # pyproject.toml is the one place the version is written
    __version__ = version("lightning_mgpu")
except PackageNotFoundError:  # a source checkout on PYTHONPATH, not installed
    __version__ = "0+unknown"

if __name__ == "lightning_mgpu":
    enable_twin()  # last: the twin imports this package's modules

__all__ = [
    "DDP2Strategy",
    "DataParallelStrategy",
    "HorovodStrategy",
    "ShardedStrategy",
    "__version__",
    "register_bundle_strategies",
]
