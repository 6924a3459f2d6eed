"""The Trainer every Lightning arm runs under: nothing but the fit (no logger, checkpoints, bars, summary, sanity or
validation), so that an arm's time is the strategy's and the model's, not Lightning's extras."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

#: The library's quiet Trainer (lightning_mgpu.testing.QUIET), without the sanity check and validation.
QUIET: dict[str, Any] = {"num_sanity_val_steps": 0, "limit_val_batches": 0}


def quiet_trainer(**kwargs: Any) -> Any:
    """:func:`lightning_mgpu.testing.quiet_trainer` with :data:`QUIET`; ``kwargs`` win (an arm that logs passes its
    logger). Lightning's per-fit banners (devices, tips, "stopped: max_steps", the GPU monitor's diagnosis table) are
    silenced as well: warnings still show.

    Example::

        quiet_trainer(strategy="ddp", devices=2, max_steps=20, callbacks=[clock]).fit(model)
    """
    import logging

    import lightning_mgpu  # noqa: F401  (registers the bundle's strategy names)
    from lightning_mgpu.testing.trainer import quiet_trainer as library_quiet_trainer

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return library_quiet_trainer(**{**QUIET, **kwargs})


def timed_fit(
    model: Any,
    loader: Any = None,
    *,
    warmup: int,
    steps: int,
    device: Any = None,
    callbacks: Sequence[Any] = (),
    **kwargs: Any,
) -> Any:
    """Fit ``model`` (on ``loader``, if given) for ``warmup + steps + 1`` steps under :func:`quiet_trainer`, ``kwargs``
    going to it, with a :func:`~benchmarks.harness.clock.step_clock` on ``device`` before ``callbacks``; returns the
    clock. Under an external launch (``LOCAL_RANK`` set), ``WORLD_SIZE`` is set to ``devices`` first: Lightning's
    teardown of a previous fit in the same process removes it.

    Example::

        clock = timed_fit(model, warmup=3, steps=20, strategy="ddp", devices=2)
        step_s = median_interval(clock.marks, 3, 20)
    """
    from .clock import step_clock

    if "LOCAL_RANK" in os.environ and "devices" in kwargs:
        os.environ["WORLD_SIZE"] = str(kwargs["devices"])
    clock = step_clock(device)
    quiet_trainer(max_steps=warmup + steps + 1, callbacks=[clock, *callbacks], **kwargs).fit(model, loader)
    return clock


def cycled(batches: Sequence[Any], count: int) -> list[Any]:
    """``count`` batches, going round ``batches`` (a few distinct batches already on the device, reused as they are)."""
    return [batches[i % len(batches)] for i in range(count)]


def timed_fit_on_device(
    model: Any, batches: Sequence[Any], *, warmup: int, steps: int, device: Any, **kwargs: Any
) -> Any:
    """:func:`timed_fit` on one device of ``device``'s type over :func:`cycled` ``batches`` (batch_size=None: as
    they are), ``kwargs`` going to the Trainer; returns the clock. The raw peer is ``raw_steps(step, cycled(...))``.

    Example::

        clock = timed_fit_on_device(model, batches, warmup=3, steps=20, device=device, precision="bf16-mixed")
    """
    from torch.utils.data import DataLoader

    loader = DataLoader(cycled(batches, warmup + steps + 1), batch_size=None)
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    return timed_fit(
        model, loader, warmup=warmup, steps=steps, device=device, devices=1, accelerator=accelerator, **kwargs
    )
