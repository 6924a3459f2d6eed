"""The tests' quiet ``Trainer`` (the library's, on the CPU) and a callback that saves where the fit ran."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lightning_mgpu.testing import trainer as testing_trainer
from lightning_mgpu.testing.parity import picklable, pytorch_lightning_twin

#: The tests' quiet Trainer: the library's (lightning_mgpu.testing.QUIET), pinned to one CPU device unless asked.
QUIET = {**testing_trainer.QUIET, "accelerator": "cpu", "devices": 1}


def quiet_trainer(namespace: str = "lightning.pytorch", **kwargs: Any) -> pl.Trainer:
    """:func:`lightning_mgpu.testing.quiet_trainer` on one CPU device unless ``kwargs`` say otherwise.

    Example::

        trainer = quiet_trainer(strategy="ddp_spawn", devices=2, max_steps=4)
    """
    return testing_trainer.quiet_trainer(namespace, **{**QUIET, **kwargs})


def _save_at_train_end(base: type) -> type:
    class SaveAtTrainEnd(base):  # type: ignore[valid-type,misc]
        """``trainer.save_checkpoint(path)`` at the end of training, in the processes that trained.

        Under a ``*_spawn`` strategy the fit runs in spawned workers, and the launching process gets the weights back
        but not the loops' progress: a checkpoint it saved after ``fit`` would resume from step 0.
        """

        def __init__(self, path: Any) -> None:
            self.path = path

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            trainer.save_checkpoint(self.path)

    return SaveAtTrainEnd


SaveAtTrainEnd = picklable(_save_at_train_end(pl.Callback), "SaveAtTrainEnd", __name__)


def __getattr__(name: str) -> type:
    """``PLSaveAtTrainEnd``: the same callback for ``pytorch_lightning``'s Trainer, built on first use."""
    if name == "PLSaveAtTrainEnd":
        return pytorch_lightning_twin(globals(), name, lambda lightning: _save_at_train_end(lightning.Callback))
    raise AttributeError(name)


def save_at_train_end(path: Any, namespace: str = "lightning.pytorch") -> Any:
    """A :class:`SaveAtTrainEnd` for the Trainer of ``namespace``."""
    return (SaveAtTrainEnd if namespace == "lightning.pytorch" else __getattr__("PLSaveAtTrainEnd"))(path)
