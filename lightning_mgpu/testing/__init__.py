"""Helpers to check a LightningModule under the bundle's strategies on a CPU, as ``torch.testing`` and Lightning's
``demos`` ship theirs. The bundle's own tests and benchmarks use the same ones.

- :mod:`~lightning_mgpu.testing.dp`: :class:`EmulatedDataParallelStrategy`, ``dp``'s replica split, per-replica steps
  and loss weighting on CPU threads (``torch.nn.DataParallel`` needs CUDA for more than one device).
- :mod:`~lightning_mgpu.testing.ddp2`: :class:`EmulatedDDP2Strategy`, ``ddp2`` with CPU threads as each node's devices.
- :mod:`~lightning_mgpu.testing.parity`: a deterministic model and data whose final weights can be compared across
  strategies, and :func:`max_abs_diff`.
- :mod:`~lightning_mgpu.testing.trainer`: :func:`quiet_trainer`, a Trainer with nothing but the fit.
- :mod:`~lightning_mgpu.testing.processes`: :func:`launch_processes`, ranks started as a launcher would, the first
  failure stopping all.

Example (your module, split as ``dp`` splits it on 3 GPUs, on the CPU)::

    from lightning_mgpu.testing import EmulatedDataParallelStrategy, quiet_trainer

    trainer = quiet_trainer(strategy=EmulatedDataParallelStrategy(), accelerator="cpu", devices=3, max_steps=5)
    trainer.fit(MyModule())

Nothing in the library imports this package.
"""

from __future__ import annotations

from lightning_mgpu.utilities.imports import lazy_exports

# name -> module, imported on first use: the emulators import Lightning, the launcher needs only the standard library.
_EXPORTS = {
    "EmulatedDataParallel": "dp",
    "EmulatedDataParallelStrategy": "dp",
    "EmulatedDDP2Strategy": "ddp2",
    "ParityModule": "parity",
    "make_data": "parity",
    "max_abs_diff": "parity",
    "QUIET": "trainer",
    "quiet_trainer": "trainer",
    "ProcessFailure": "processes",
    "launch_processes": "processes",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
