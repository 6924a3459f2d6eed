"""Log the gradients' norms before each optimizer step, as Lightning 1.x's ``Trainer(track_grad_norm=p)`` did."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import grad_norm
from typing_extensions import override


def legacy_grad_norms(module: torch.nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict:
    """The dict 1.9's ``pytorch_lightning.utilities.grads.grad_norm`` made: each parameter's gradient's p-norm and
    their overall norm, as Python floats rounded to 4 decimals (2.x's ``grad_norm`` gives unrounded tensors).

    Args:
        module: the module whose parameters' gradients are read (those without one are left out).
        norm_type: p: a positive number or ``"inf"``.
        group_separator: what joins ``grad_{p}_norm`` and the parameter's name (a logger's group separator).

    Returns:
        ``{"grad_2.0_norm/layer.weight": 0.1234, ..., "grad_2.0_norm_total": 0.5678}``; empty where no parameter has
        a gradient.
    """
    norms = grad_norm(module, norm_type, group_separator=group_separator)
    return {key: round(float(value), 4) for key, value in norms.items()}


class TrackGradNorm(Callback):
    """Log the gradients' ``norm_type``-norms before each optimizer step: 1.x's ``Trainer(track_grad_norm=p)``.

    Lightning 2.0 removed the flag; ``lightning-mgpu upgrade`` writes this callback in its place (a module's
    ``on_before_optimizer_step`` logging 2.x's ``grad_norm(self, p)`` would log on step only, for every optimizer,
    past the module's ``log_grad_norm``). It does what 1.6-1.9's precision plugin did (``_track_grad_norm``, 1.9.5):

    - after the backward (the gradients unscaled under mixed precision) and before clipping, for the first
      optimizer only (1.x's ``optimizer_idx == 0``);
    - the norms of :func:`legacy_grad_norms`, keys joined by the logger's group separator where there is exactly one
      logger;
    - logged by the module's own ``log_grad_norm(grad_norm_dict)`` where it defines one (1.x's hook for changing how
      they are logged), else as 1.x's default did: ``log_dict(norms, on_step=True, on_epoch=True, prog_bar=False,
      logger=True)`` (keys ending ``_step`` and ``_epoch``).

    1.4 computed the norms only on steps where ``(global_step + 1) % log_every_n_steps == 0`` (its epoch mean covers
    those steps only), and 1.4-1.5 put them in the progress bar as well; the values a logger receives are the same.

    Args:
        norm_type: 1.x's ``track_grad_norm``: a positive number or ``"inf"``; -1 (1.x's default) logs nothing.
    """

    def __init__(self, norm_type: float | int | str = 2) -> None:
        # 1.x's Trainer checked the value when built: an int, a float or "inf" (-1: off).
        if not isinstance(norm_type, (int, float)) and norm_type != "inf":
            raise ValueError(f"`track_grad_norm` should be an int, a float or 'inf' (infinity norm). Got {norm_type}.")
        self.norm_type = float(norm_type)

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self.norm_type == -1 or not trainer.optimizers or optimizer is not trainer.optimizers[0]:
            return  # off, or not the first optimizer (1.x tracked optimizer_idx 0 only)
        kwargs: dict[str, Any] = {}
        if len(trainer.loggers) == 1:
            kwargs["group_separator"] = trainer.loggers[0].group_separator
        norms = legacy_grad_norms(pl_module, self.norm_type, **kwargs)
        if not norms:
            return
        # A module written for 1.x may override log_grad_norm (2.x's LightningModule has no such method): it decides.
        own = getattr(pl_module, "log_grad_norm", None)
        if callable(own):
            own(norms)
        else:
            pl_module.log_dict(norms, on_step=True, on_epoch=True, prog_bar=False, logger=True)
