"""A clear refusal when a Trainer of one Lightning namespace is handed a strategy or plugin of the other.

``lightning.pytorch`` and ``pytorch_lightning`` are separate class trees: a ``lightning.pytorch`` strategy is not a
``pytorch_lightning.strategies.Strategy``. Lightning's own check then says "You selected an invalid strategy name",
which sends the user looking for a typo. This guard runs first and names the import that matches the Trainer.

It wraps ``_AcceleratorConnector._check_config_and_set_final_flags`` (the method that validates ``strategy``,
``accelerator`` and ``plugins``; its signature is unchanged from Lightning 2.0 to 2.6) of the namespace this module is
loaded for. The twin (``lightning_mgpu.pl``) loads this file again for ``pytorch_lightning``, so each namespace's
Trainer gets its own guard. Idempotent.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.pytorch.accelerators import Accelerator
from lightning.pytorch.plugins import Precision
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector

# One error class for both namespaces (utilities.namespaces is shared, not twinned), so `except` catches either.
from lightning_mgpu.utilities.namespaces import PACKAGE, TWIN, MixedLightningNamespacesError

#: Lightning's base classes that a Trainer argument subclasses, by the module path below the namespace's package.
_BASES = {
    Strategy: ".strategies.strategy",
    Accelerator: ".accelerators.accelerator",
    Precision: ".plugins.precision.precision",
    CheckpointIO: ".plugins.io.checkpoint_io",
    ClusterEnvironment: ".plugins.environments.cluster_environment",
}
#: This namespace's packages: {"lightning.pytorch", "lightning.fabric"}, or the twin's {"pytorch_lightning",
#: "lightning_fabric"}; read from the classes, because the twin's source has every such name rewritten.
_OWN_ROOTS = frozenset(base.__module__[: -len(suffix)] for base, suffix in _BASES.items())
_OWN = Strategy.__module__[: -len(_BASES[Strategy])]
_GUARDED = "_lightning_mgpu_namespace_guard"


def foreign_namespace(obj: Any) -> str | None:
    """The other Lightning namespace's package that ``obj``'s class comes from, or None (this namespace's, or not a
    Lightning strategy, accelerator or plugin at all)."""
    for klass in type(obj).__mro__:
        module = klass.__module__ or ""
        for base, suffix in _BASES.items():
            if klass.__name__ == base.__name__ and module.endswith(suffix):
                root = module[: -len(suffix)]
                return root if root not in _OWN_ROOTS else None
    return None


def check_same_namespace(argument: str, obj: Any) -> None:
    """Raise :class:`MixedLightningNamespacesError` naming the right import when ``obj`` is the other namespace's.

    Args:
        argument: the Trainer argument ``obj`` was passed as (for the message).
        obj: a strategy, accelerator or plugin instance (anything else passes).

    Raises:
        MixedLightningNamespacesError: ``obj``'s class subclasses the other namespace's base.

    Example::

        import pytorch_lightning as pl
        from lightning_mgpu import DataParallelStrategy   # the lightning.pytorch class, with lightning installed
        pl.Trainer(strategy=DataParallelStrategy())       # raises, naming lightning_mgpu.pl.DataParallelStrategy
    """
    other = foreign_namespace(obj)
    if other is None:
        return
    cls = type(obj)
    bundle = cls.__module__.startswith("lightning_mgpu")
    if bundle:
        # (no Lightning namespace written out here: the twin's copy of this source has them rewritten)
        twin = TWIN if _OWN.startswith("pytorch_") else PACKAGE
        fix = f"`from {twin} import {cls.__name__}`"
        if argument == "strategy":
            fix += " (or pass its registered name as a string, which resolves in either namespace)"
    else:
        # lightning.fabric's counterpart is lightning_fabric, lightning.pytorch's is pytorch_lightning (and back).
        mine = next(root for root in _OWN_ROOTS if ("fabric" in root) == ("fabric" in other))
        fix = f"import {cls.__name__} from `{mine}` instead of `{other}`"
    raise MixedLightningNamespacesError(
        f"`{argument}={cls.__name__}(...)` is a `{other}` class ({cls.__module__}), but this Trainer is `{_OWN}`'s,"
        f" which accepts only its own classes. Use the class of the Trainer's namespace: {fix}. Keep one namespace"
        f" per script: `{_OWN}` classes with a `{_OWN}` Trainer."
    )


def guard_mixed_namespaces() -> None:
    """Make this namespace's Trainer refuse the other namespace's strategies, accelerators and plugins by name."""
    original = _AcceleratorConnector._check_config_and_set_final_flags
    if getattr(original, _GUARDED, False):
        return

    @functools.wraps(original)
    def checked(self: Any, strategy: Any, accelerator: Any, precision: Any, plugins: Any, sync_batchnorm: bool) -> None:
        check_same_namespace("strategy", strategy)
        check_same_namespace("accelerator", accelerator)
        items: Iterable[Any] = plugins if isinstance(plugins, (list, tuple)) else [plugins]
        for plugin in items:
            check_same_namespace("plugins", plugin)
        return original(self, strategy, accelerator, precision, plugins, sync_batchnorm)

    setattr(checked, _GUARDED, True)
    _AcceleratorConnector._check_config_and_set_final_flags = checked  # type: ignore[method-assign]
