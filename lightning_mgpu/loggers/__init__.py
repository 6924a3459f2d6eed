"""Loggers.

``NeptuneLogger`` is a Lightning 2.x logger on the ``neptune`` 1.x client (offline, debug, or a
self-hosted server); it needs the ``neptune`` extra only when one is created.
"""

from lightning_mgpu.loggers.neptune import NeptuneLogger, NeptuneServerUnreachableError

__all__ = ["NeptuneLogger", "NeptuneServerUnreachableError"]
