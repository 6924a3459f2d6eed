"""Stochastic weight averaging as Lightning 1.x's ``Trainer(stochastic_weight_avg=True)`` ran it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import StochasticWeightAveraging
from typing_extensions import override

#: Stands in for ``swa_lrs`` until the optimizer's learning rates are read (2.x's constructor requires a value).
_UNTIL_READ = 1.0


class LegacyStochasticWeightAveraging(StochasticWeightAveraging):
    """Lightning's ``StochasticWeightAveraging`` whose ``swa_lrs`` may be left out, as in 1.x.

    1.x's ``Trainer(stochastic_weight_avg=True)`` added ``StochasticWeightAveraging()`` with every default, and its
    ``swa_lrs=None`` meant: the learning rates the optimizer's param groups have when averaging starts (at
    ``swa_epoch_start``, after any scheduler moved them). 2.x requires ``swa_lrs``. ``lightning-mgpu upgrade`` writes
    this class for the flag and for ``StochasticWeightAveraging()`` called without ``swa_lrs``; given ``swa_lrs``, it
    is Lightning's own.

    Args:
        swa_lrs: as Lightning's; None (the default): the optimizer's learning rates when averaging starts.
        kwargs: Lightning's other arguments (``swa_epoch_start=0.8``, ``annealing_epochs=10``, ...).
    """

    def __init__(self, swa_lrs: float | list[float] | None = None, **kwargs: Any) -> None:
        super().__init__(swa_lrs=_UNTIL_READ if swa_lrs is None else swa_lrs, **kwargs)
        self._lrs_from_optimizer = swa_lrs is None

    @classmethod
    def unless_given(cls, callbacks: Iterable[object] | None) -> list[StochasticWeightAveraging]:
        """What 1.x's ``Trainer(stochastic_weight_avg=True, callbacks=callbacks)`` added to ``callbacks``.

        1.x (``_configure_swa_callbacks``, 1.2 to 1.6) added ``StochasticWeightAveraging()`` only where the
        callbacks held none (of any subclass); ``lightning-mgpu upgrade`` writes
        ``callbacks=[*callbacks, *LegacyStochasticWeightAveraging.unless_given(callbacks)]`` where the list is
        read at run time.

        Args:
            callbacks: the callbacks the Trainer is given (None or a single callback as 1.x took them).

        Returns:
            ``[LegacyStochasticWeightAveraging()]``, or ``[]`` where ``callbacks`` holds a StochasticWeightAveraging.
        """
        given = [] if callbacks is None else callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
        if any(isinstance(callback, StochasticWeightAveraging) for callback in given):
            return []
        return [cls()]

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Decision: read the rates where Lightning builds its SWALR from them (its first epoch in the SWA window), so
        # that a scheduler's changes up to then count, as in 1.x.
        starting = not self._initialized and self.swa_start <= trainer.current_epoch <= self.swa_end
        if self._lrs_from_optimizer and starting:
            self._swa_lrs = [float(group["lr"]) for group in trainer.optimizers[0].param_groups]
        super().on_train_epoch_start(trainer, pl_module)
