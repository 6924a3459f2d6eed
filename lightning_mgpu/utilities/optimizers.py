"""The optimizer a Lightning wrapper holds: what strategies and precision plugins step, clip and save."""

from __future__ import annotations

from typing import Any

__all__ = ["unwrap_optimizer"]


def unwrap_optimizer(optimizer: Any) -> Any:
    """The optimizer inside a Lightning ``LightningOptimizer``, or ``optimizer`` itself.

    Only the instance's own ``_optimizer`` counts: ``LightningOptimizer`` forwards unknown attributes to the
    optimizer it wraps, and Horovod's ``DistributedOptimizer`` classes are subclassed by it, so a class-level
    or forwarded lookup could find the wrong object.
    """
    while True:
        inner = getattr(optimizer, "__dict__", {}).get("_optimizer")
        if inner is None or inner is optimizer:
            return optimizer
        optimizer = inner
