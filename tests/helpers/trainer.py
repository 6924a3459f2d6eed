"""One quiet ``Trainer`` for tests: no progress bar, summary, logger or checkpoints unless asked for."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from tests.helpers.namespaces import picklable, pytorch_lightning_twin

QUIET = {
    "accelerator": "cpu",
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def quiet_trainer(namespace: str = "lightning.pytorch", **kwargs: Any) -> pl.Trainer:
    """``pl.Trainer(**QUIET | kwargs)``: keyword arguments override the quiet defaults.

    ``namespace="pytorch_lightning"`` builds that distribution's Trainer, with the bundle's twin callbacks.

    Example::

        trainer = quiet_trainer(strategy="ddp_spawn", devices=2, max_steps=4)
    """
    # CleanExit as a user of the bundle would add it: spawned workers release their process group after success.
    if namespace == "pytorch_lightning":
        import pytorch_lightning as trainer_module
        from lightning_mgpu.pl.callbacks import CleanExit
    else:
        trainer_module = pl
        from lightning_mgpu.callbacks import CleanExit

    kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), CleanExit()]
    return trainer_module.Trainer(**{**QUIET, **kwargs})


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
