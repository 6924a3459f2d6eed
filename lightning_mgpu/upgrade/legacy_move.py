"""Lightning 1.0-1.4's ``@auto_move_data`` decorator, for converted 1.x scripts (rule ``auto-move-data``).

1.x's ``pytorch_lightning.core.decorators.auto_move_data`` (deprecated in 1.3, removed in 1.5) wrapped a
LightningModule method, typically ``forward``, so that its arguments were moved to the module's device before the
method ran: ``model.to("cuda"); model(torch.zeros(1, 3))`` gave ``forward`` a CUDA tensor. It did so through the
module's own ``transfer_batch_to_device`` (the default one, or the module's override), given ``(args, kwargs)`` and
``self.device``; on an object that is not a LightningModule it only called the method. 2.x has no such decorator;
``lightning-mgpu upgrade`` imports :func:`legacy_auto_move_data` instead, which does the same, so that a converted
module called outside the Trainer (inference on CPU inputs) still gets its inputs on its device.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: The Lightning distributions a LightningModule can come from (2.x ships the same class under both names).
_NAMESPACES = ("lightning.pytorch", "pytorch_lightning")


def _is_lightning_module(obj: object) -> bool:
    """Whether ``obj`` is a LightningModule of an imported Lightning distribution (one that is not imported has made
    no instance)."""
    for name in _NAMESPACES:
        namespace = sys.modules.get(name)
        cls = getattr(namespace, "LightningModule", None) if namespace is not None else None
        if cls is not None and isinstance(obj, cls):
            return True
    return False


def legacy_auto_move_data(fn: F) -> F:
    """1.x's ``@auto_move_data``: ``fn``'s arguments moved to the module's device before it runs (module docstring).

    As 1.4 did, the positional and keyword arguments go to the module's ``transfer_batch_to_device`` as one
    ``(args, kwargs)`` pair, with ``device=self.device`` and ``dataloader_idx=None``; what it returns is what ``fn``
    gets. On an object that is not a LightningModule, ``fn`` is called as it is.

    Args:
        fn: a LightningModule method (``forward``, ``__call__``, a predict helper), taking ``self`` first.

    Returns:
        The wrapped method, with ``fn``'s name and docstring.
    """

    @functools.wraps(fn)
    def auto_transfer_args(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_lightning_module(self):
            return fn(self, *args, **kwargs)
        args, kwargs = self.transfer_batch_to_device((args, kwargs), device=self.device, dataloader_idx=None)
        return fn(self, *args, **kwargs)

    return auto_transfer_args  # type: ignore[return-value]
