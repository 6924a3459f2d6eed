"""Lightning 1.x's ``*_step_end`` hooks, for converted 1.x modules (rule ``step-end``).

1.x called ``training_step_end(output)`` (and ``validation_step_end``, ``test_step_end``) right after each step, in
the same process, with that step's output, under every strategy but ``dp``/``ddp2``; there it got the replicas'
outputs gathered on the root device. What the hook returned replaced the step's output (the loss, what the epoch
end's ``outputs`` list held); where it returned ``None`` the step's own output stayed (1.x's loops:
``strategy_output if model_output is None else model_output``). 2.x never calls these hooks.

``lightning-mgpu upgrade`` keeps such a hook as ``_<step>_end_1x`` and puts :class:`LegacyStepEnds` last among the
class's bases (last: the class hierarchy stays valid where a base class in another file has it already). The mixin
does what 1.x's loops did:

- every ``training_step``/``validation_step``/``test_step`` defined on the class or on any subclass (in this file or
  another: a base class's step end applied to its subclasses' steps in 1.x) is wrapped, at class creation
  (``__init_subclass__``), so that the outermost step call made while a Trainer runs the module hands its output to
  ``_<step>_end_1x`` and returns what that gives (the step's output where it gives ``None``). A step that calls
  another step (``test_step`` returning ``self.validation_step(...)``, a subclass's ``super().training_step(...)``)
  gets one step end, its own, as in 1.x; a step called outside a Trainer, or by ``predict_step`` while the Trainer
  predicts, gets none, as in 1.x;
- under this bundle's ``dp`` and ``ddp2`` (the strategies that call ``combine_replica_outputs``) the wrapper leaves the
  output alone and :meth:`LegacyStepEnds.combine_replica_outputs` applies the step end to the replicas' gathered
  outputs, as 1.x's DataParallel did; a step without a step end gets 1.9's DataParallel reduction there (the mean of
  the loss in training, of every tensor in evaluation), which is what 1.x computed for it.

Why a run-time mixin and not ``return self._<step>_end_1x(...)`` written into each step: the step is often not in the
file (a library's base class whose users write the step), a subclass elsewhere overrides it, and under ``dp`` the
hook must see all replicas' outputs, which only the strategy has. The converter writes the explicit form only where
the step's outputs are also collected for a converted epoch end in the step itself (the collected value must be the
step end's result) and the file shows no ``dp``/``ddp2``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: The steps 1.x followed with a ``<step>_end`` hook.
STEPS = ("training_step", "validation_step", "test_step")
_WRAPPED = "__lightning_mgpu_step_end_1x__"
_DEPTH = "_step_end_1x_depth"


def step_end_1x(module: Any, step_name: str, output: Any) -> Any:
    """``output`` passed through the module's ``_<step_name>_end_1x`` (where it has one), as 1.x's loop did: what the
    hook returns, or ``output`` where it returns ``None``."""
    end = getattr(module, f"_{step_name}_end_1x", None)
    if end is None:
        return output
    result = end(output)
    return output if result is None else result


def combines_replicas(module: Any) -> bool:
    """Whether the Trainer running ``module`` calls ``combine_replica_outputs`` on each step's output (this bundle's
    ``dp`` and ``ddp2``, on one device too)."""
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return False
    # By name, in the bundle's tree: the same classes under lightning.pytorch and their pytorch_lightning twins
    # (lightning_mgpu.pl), without importing either.
    return any(
        cls.__name__ in ("DataParallelStrategy", "DDP2Strategy") and cls.__module__.startswith("lightning_mgpu.")
        for cls in type(trainer.strategy).__mro__
    )


def _dp_reduce_1x(step_name: str, outputs: Any) -> Any:
    """What 1.9's DataParallelStrategy made of the gathered outputs of a step without a step end: the mean of a
    training loss (a tensor, or a dict's ``"loss"``), the mean of every tensor of an evaluation output."""
    import torch
    from lightning_utilities.core.apply_func import apply_to_collection

    def mean(t: torch.Tensor) -> torch.Tensor:
        return t.float().mean().to(t.dtype)

    if step_name == "training_step":
        if isinstance(outputs, dict) and isinstance(outputs.get("loss"), torch.Tensor):
            return {**outputs, "loss": mean(outputs["loss"])}
        return mean(outputs) if isinstance(outputs, torch.Tensor) else outputs
    return apply_to_collection(outputs, torch.Tensor, mean)


def _after_step(step_name: str, step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(step)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = self.__dict__.get(_DEPTH, 0)
        self.__dict__[_DEPTH] = depth + 1
        try:
            output = step(self, *args, **kwargs)
        finally:
            self.__dict__[_DEPTH] = depth
        # Decision: only the outermost step call, made while a Trainer runs the module, gets the step end (1.x's loop
        # called it once, after the step it ran); under dp/ddp2 combine_replica_outputs applies it instead. A step
        # that predict_step calls (predict_step is not wrapped) gets none: 1.x's predict loop called no step end.
        trainer = getattr(self, "_trainer", None)
        if depth or trainer is None or getattr(trainer, "predicting", False) or combines_replicas(self):
            return output
        return step_end_1x(self, step_name, output)

    setattr(run, _WRAPPED, True)
    return run


class LegacyStepEnds:
    """Mixin (last among a LightningModule's bases) that runs 1.x's ``*_step_end`` hooks, kept as
    ``_<step>_end_1x``, after each step as 1.x did; see the module's docstring.

    Example::

        class Model(LightningModule, LegacyStepEnds):
            def training_step(self, batch, batch_idx):
                return {"loss": self.loss(batch), "flag": batch_idx % 2 == 0}

            def _training_step_end_1x(self, outputs):  # 1.x's training_step_end
                return outputs["loss"].mean()
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in STEPS:
            step = cls.__dict__.get(name)
            if callable(step) and not getattr(step, _WRAPPED, False):
                setattr(cls, name, _after_step(name, step))

    def combine_replica_outputs(self, step_name: str, outputs: Any) -> Any:
        """Under this bundle's dp/ddp2: 1.x's step end applied to the replicas' gathered outputs (their output where
        it returns ``None``), or 1.9's DataParallel reduction for a step without one."""
        if step_name not in STEPS:
            return outputs  # predict_step: 1.x had no step end for it, and gathered its outputs as they are
        end = getattr(self, f"_{step_name}_end_1x", None)
        if end is None:
            return _dp_reduce_1x(step_name, outputs)
        result = end(outputs)
        return outputs if result is None else result
