"""What lightning_mgpu does for every Trainer, through Lightning's ``lightning.pytorch.callbacks_factory`` entry point.

Lightning calls :func:`callbacks_factory` while it builds each Trainer, whether or not the script imported
lightning_mgpu; it is the one hook that runs in the launching process before a spawn launcher starts workers.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from lightning_mgpu.callbacks.launcher_guard import LauncherGuard, launcher_environment_present
from lightning_mgpu.utilities.ports import release_port_of_earlier_fit
from lightning_mgpu.utilities.process_group import destroy_at_exit


def callbacks_factory() -> list[Callback]:
    """The entry point: frees ``MASTER_PORT`` from an earlier in-process fit, has a process that ends well leave its
    process group first, and adds :class:`LauncherGuard` where a launcher's environment is (horovodrun, torchrun).

    Leaving the group: Lightning's own ``ddp`` never destroys it, and a gloo rank that exits with its group alive can
    abort at interpreter shutdown ("terminate called without an active exception", SIGABRT) after a fit that finished:
    seen in a plain 1.x script converted by ``lightning-mgpu upgrade`` and run under ``ddp`` on the CPU. One exit
    handler per process destroys the group unless the process failed (torch's advice; what ``CleanExit`` does, for every
    Trainer).
    """
    release_port_of_earlier_fit()
    destroy_at_exit()
    return [LauncherGuard()] if launcher_environment_present() else []
