"""One place that routes the four step methods of a strategy to something other than Lightning's default."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.pytorch.strategies import Strategy
from lightning.pytorch.utilities.types import STEP_OUTPUT
from typing_extensions import override

# step method -> the precision plugin's context manager for it
_CONTEXTS = {
    "training_step": "train_step_context",
    "validation_step": "val_step_context",
    "test_step": "test_step_context",
    "predict_step": "predict_step_context",
}


class StepRouting(Strategy):
    """Mixin for a Lightning ``Strategy``: ``_step_runner(name)`` decides where each step runs.

    A runner returned for a step is called under the precision plugin's context for that step; ``None`` keeps
    Lightning's own path (``_ForwardRedirection`` through the wrapped model). ``dp`` routes steps into its
    DataParallel engine; ``sharded`` runs evaluation on the bare module.
    """

    def _step_runner(self, step_name: str) -> Callable[..., Any] | None:
        return None

    def _route(self, step_name: str, *args: Any, **kwargs: Any) -> Any:
        runner = self._step_runner(step_name)
        if runner is None:
            return getattr(super(), step_name)(*args, **kwargs)
        with getattr(self.precision_plugin, _CONTEXTS[step_name])():
            return runner(*args, **kwargs)

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT:
        return self._route("training_step", *args, **kwargs)

    @override
    def validation_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT:
        return self._route("validation_step", *args, **kwargs)

    @override
    def test_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT:
        return self._route("test_step", *args, **kwargs)

    @override
    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._route("predict_step", *args, **kwargs)
