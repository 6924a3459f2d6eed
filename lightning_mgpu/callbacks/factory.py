"""What lightning_mgpu does for every Trainer, through Lightning's ``lightning.pytorch.callbacks_factory`` entry point.

Lightning calls :func:`callbacks_factory` while it builds each Trainer, whether or not the script imported
lightning_mgpu; it is the one hook that runs in the launching process before a spawn launcher starts workers.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from lightning_mgpu.callbacks.launcher_guard import LauncherGuard, launcher_environment_present
from lightning_mgpu.utilities.ports import release_port_of_earlier_fit


def callbacks_factory() -> list[Callback]:
    """The entry point: frees ``MASTER_PORT`` from an earlier in-process fit, and adds :class:`LauncherGuard` where a
    launcher's environment is (horovodrun, torchrun)."""
    release_port_of_earlier_fit()
    return [LauncherGuard()] if launcher_environment_present() else []
