"""1.x's ``trainer.tune()`` for a Trainer whose ``auto_lr_find``/``auto_scale_batch_size`` came from parsed flags.

A converted script builds such a Trainer with :func:`~lightning_mgpu.upgrade.trainer_args.from_argparse_args`, which
keeps the two flags on the Trainer (:data:`FLAGS_ATTRIBUTE`: 2.x's Trainer takes neither), and calls
:func:`legacy_tune` where 1.x called ``trainer.tune(...)`` (``lightning-mgpu upgrade``, rule ``tuner-flags-read``).
"""

from __future__ import annotations

import importlib
from typing import Any

#: The Trainer attribute :func:`~lightning_mgpu.upgrade.trainer_args.from_argparse_args` keeps the flags in.
FLAGS_ATTRIBUTE = "_lightning_mgpu_tuner_flags"
#: The Trainer flags 1.x's tune() read, and the Tuner method each ran, in the order it ran them.
TUNER_FLAGS = {"auto_scale_batch_size": "scale_batch_size", "auto_lr_find": "lr_find"}


def keep_tuner_flags(trainer: Any, flags: dict[str, Any]) -> None:
    """Keep 1.x's tuner flags on ``trainer`` for :func:`legacy_tune` (those that are off are left out).

    Args:
        trainer: the 2.x Trainer built without them.
        flags: ``auto_scale_batch_size`` / ``auto_lr_find`` as the 1.x Trainer was given them.
    """
    setattr(trainer, FLAGS_ATTRIBUTE, {name: value for name, value in flags.items() if value})


def legacy_tune(
    trainer: Any,
    model: Any = None,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    datamodule: Any = None,
    scale_batch_size_kwargs: dict[str, Any] | None = None,
    lr_find_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """1.x's ``trainer.tune(model, ...)``: run the tuners the Trainer's flags turned on, as 1.9's ``Tuner._tune`` did.

    ``auto_scale_batch_size`` first (its string is the ``mode``, else ``"power"``), then ``auto_lr_find`` (its string
    is the attribute the learning rate goes in, else ``lr`` or ``learning_rate``; the rate found is set, as 1.x's tune()
    set it), each through 2.x's ``Tuner`` of the Trainer's own distribution. A Trainer with no flags kept (built with
    them off, or by a 2.x call, which cannot take them) runs nothing, as 1.x's tune() with the flags off did.

    Args:
        trainer: the Trainer (flags kept by :func:`keep_tuner_flags`).
        model: the LightningModule.
        train_dataloaders: as 1.x's tune() took them.
        val_dataloaders: as 1.x's tune() took them.
        datamodule: as 1.x's tune() took it.
        scale_batch_size_kwargs: more arguments for ``scale_batch_size`` (a given ``mode`` wins over the flag's).
        lr_find_kwargs: more arguments for ``lr_find`` (a given ``attr_name``/``update_attr`` wins).

    Returns:
        1.x's result: ``{"scale_batch_size": the size found}`` and/or ``{"lr_find": the finder}``, for the tuners
        that ran (empty where none did).
    """
    flags: dict[str, Any] = getattr(trainer, FLAGS_ATTRIBUTE, {})
    root = type(trainer).__module__.split(".")[0]  # "pytorch_lightning" or "lightning"
    tuner_module = importlib.import_module(
        "pytorch_lightning.tuner" if root == "pytorch_lightning" else f"{root}.pytorch.tuner"
    )
    tuner = tuner_module.Tuner(trainer)
    loaders = {
        "train_dataloaders": train_dataloaders,
        "val_dataloaders": val_dataloaders,
        "datamodule": datamodule,
    }
    result: dict[str, Any] = {}
    size = flags.get("auto_scale_batch_size")
    if size:
        kwargs = dict(scale_batch_size_kwargs or {})
        if isinstance(size, str):
            kwargs.setdefault("mode", size)  # 1.9: the flag's string is the mode
        result["scale_batch_size"] = tuner.scale_batch_size(model, **loaders, **kwargs)
    lr = flags.get("auto_lr_find")
    if lr:
        kwargs = dict(lr_find_kwargs or {})
        kwargs.setdefault("update_attr", True)  # 1.x's tune() set the rate it found
        if isinstance(lr, str):
            kwargs.setdefault("attr_name", lr)  # 1.9: the flag's string names the attribute
        result["lr_find"] = tuner.lr_find(model, **loaders, **kwargs)
    return result
