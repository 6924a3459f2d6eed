"""A quiet ``Trainer``: no logger, checkpoints, progress bar or model summary unless asked for."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["QUIET", "quiet_trainer"]

#: The Trainer arguments that keep a fit to the fit itself.
QUIET: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def quiet_trainer(namespace: str = "lightning.pytorch", **kwargs: Any) -> Any:
    """``Trainer(**QUIET | kwargs)``, with :class:`~lightning_mgpu.callbacks.CleanExit` added to the callbacks.

    Args:
        namespace: ``"lightning.pytorch"`` or ``"pytorch_lightning"`` (that distribution's Trainer, with the bundle's
            twin callback).
        **kwargs: Trainer arguments; they override the quiet ones.

    Example::

        trainer = quiet_trainer(strategy="ddp_spawn", accelerator="cpu", devices=2, max_steps=4)
    """
    # CleanExit as a user of the bundle would add it: spawned workers release their process group after success.
    twin = namespace == "pytorch_lightning"
    lightning = importlib.import_module("pytorch_lightning" if twin else "lightning.pytorch")
    callbacks = importlib.import_module("lightning_mgpu.pl.callbacks" if twin else "lightning_mgpu.callbacks")
    kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), callbacks.CleanExit()]
    return lightning.Trainer(**{**QUIET, **kwargs})
