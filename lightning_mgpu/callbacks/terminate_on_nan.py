"""Stop training at a loss or a weight that is not finite, as Lightning 1.x's ``Trainer(terminate_on_nan=True)`` did."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


class TerminateOnNaN(Callback):
    """Raise ``ValueError`` when a training loss, or after a backward any parameter, is NaN or infinite.

    Lightning 1.5 deprecated ``Trainer(terminate_on_nan=True)`` and 2.0 removed it; ``lightning-mgpu upgrade`` writes
    this callback in its place. It checks where 1.x checked (``loops/optimization/optimizer_loop.py`` in 1.6.5), under
    automatic optimization only, as 1.x did:

    - before the backward, the loss the step returned (divided by ``accumulate_grad_batches``, as 1.x saw it): ``The
      loss returned in `training_step` is tensor(nan).``;
    - after the backward, every parameter: ``Detected nan and/or inf values in `layer.weight`.``

    The error ends the fit on this rank; under the bundle's strategies and Lightning's ``ddp`` the other ranks stop
    with it. A run that should go on past a bad batch wants ``detect_anomaly=True`` to find the operation, or a
    ``training_step`` that returns ``None`` for that batch (skipped), instead.
    """

    @override
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        if pl_module.automatic_optimization and not torch.isfinite(loss).all():
            raise ValueError(f"The loss returned in `training_step` is {loss}.")

    @override
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not pl_module.automatic_optimization:
            return
        for name, param in pl_module.named_parameters():
            if not torch.isfinite(param).all():
                raise ValueError(
                    f"Detected nan and/or inf values in `{name}`."
                    " Check your forward pass for numerically unstable operations."
                )
