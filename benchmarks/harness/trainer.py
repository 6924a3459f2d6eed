"""The Trainer every Lightning arm runs under: nothing but the fit (no logger, checkpoints, bars, summary, sanity or
validation), so that an arm's time is the strategy's and the model's, not Lightning's extras."""

from __future__ import annotations

from typing import Any

QUIET: dict[str, Any] = {
    "logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False,
    "num_sanity_val_steps": 0, "limit_val_batches": 0,
}  # fmt: skip


def quiet_trainer(**kwargs: Any) -> Any:
    """``lightning.pytorch.Trainer(**QUIET, **kwargs)``; ``kwargs`` win (an arm that logs passes its logger).
    Lightning's per-fit banners (devices, tips, "stopped: max_steps", the GPU monitor's diagnosis table) are silenced as
    well: warnings still show.

    Example::

        quiet_trainer(strategy="ddp", devices=2, max_steps=20, callbacks=[clock]).fit(model)
    """
    import logging

    import lightning.pytorch as pl

    import lightning_mgpu  # noqa: F401  (registers the bundle's strategy names)

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return pl.Trainer(**{**QUIET, **kwargs})
