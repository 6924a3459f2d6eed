"""Lightning 1.x's ``LightningModule.get_progress_bar_dict()``, for converted 1.x modules (rule progress-bar-dict).

Up to 1.6 the progress bar showed ``{**pl_module.get_progress_bar_dict(), **trainer.progress_bar_metrics}`` (1.0-1.4's
``trainer.progress_bar_dict``, 1.5-1.6's ``ProgressBarBase.get_metrics``), so a module could override
``get_progress_bar_dict`` to change what the bar showed, most often ``items = super().get_progress_bar_dict();
items.pop("v_num", None); return items``. The default returned 1.x's standard metrics: ``loss``, the mean of the
last 20 training losses as ``f"{mean:.3g}"`` (``"nan"`` before the first one under automatic optimization, no entry
under manual optimization), ``split_idx`` under truncated backpropagation through time, and ``v_num``, the logger's
version (its last 4 characters where it is a string). 1.7 removed the hook; 2.x never calls it, its base class has
none (``super().get_progress_bar_dict()`` raises ``AttributeError``) and its bar no longer shows the loss.

``lightning-mgpu upgrade`` keeps such an override as it is and puts :class:`LegacyProgressBarDict` last among the
class's bases (last, as ``LegacyStepEnds``: the class hierarchy stays valid where a base in another file has it
already). The mixin does what 1.x did:

- :meth:`LegacyProgressBarDict.get_progress_bar_dict` returns 1.x's default, so the override's ``super()`` call works:
  ``loss`` from the training losses a small callback records (1.x's ``TensorRunningAccum(window_length=20)`` of each
  optimization step's loss, the step end's result where there is one, in automatic optimization only), and
  ``v_num`` as 2.x's ``get_standard_metrics`` gives it (the same rule as 1.6's). ``split_idx`` never appears: 2.x
  has no truncated backpropagation through time, so there is no split to show;
- while a Trainer runs a module that overrides the hook, Lightning's ``ProgressBar.get_metrics`` (the one every bar,
  TQDM's, Rich's or a user's subclass calling ``super()``, reaches; 1.5-1.6's ``ProgressBarBase.get_metrics``) returns
  ``{**pl_module.get_progress_bar_dict(), **trainer.progress_bar_metrics}``, as 1.x's did. For any other module it
  returns what it returned before, unchanged: the patch, installed once on the first such module, hands every other
  call to the original.

Where the mixin hooks in: the class's ``setup`` (what the module has, its own or an inherited one) is wrapped when the
class is created (``__init_subclass__``), on every subclass too, so it runs before the user's body whether or not
that calls ``super().setup(stage)``. ``setup`` is the first module hook 2.x calls in each of fit, validate, test and
predict, after the Trainer has its callbacks (the progress bar included) and before any batch; a mixin's own hook
would not do, as LightningModule's empty hooks come before it in the MRO, and one that relied on the user's
``super()`` call would be skipped by the many overrides without one. There the loss recorder is put first among the
Trainer's callbacks (1.x updated the running loss before any callback's ``on_train_batch_end``, where the bar reads
it) and the progress bar's ``get_metrics`` patched; both are idempotent (``setup`` calling ``super().setup``, a second
``fit``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

_WRAPPED = "__lightning_mgpu_progress_bar_dict_1x__"
#: 1.x's running loss window (``TrainingBatchLoop.running_loss = TensorRunningAccum(window_length=20)``).
WINDOW = 20
_RECORDER_CLASSES: dict[str, type] = {}


def instance_namespace(obj: Any) -> str:
    """``"lightning.pytorch"`` or ``"pytorch_lightning"``: the Lightning tree ``obj``'s class comes from (read from the
    live object's class hierarchy, not from source code as :func:`lightning_mgpu.upgrade.findings.namespace_of`)."""
    for cls in type(obj).__mro__:
        for namespace in ("lightning.pytorch", "pytorch_lightning"):
            if cls.__module__.startswith(namespace + "."):
                return namespace
    return "lightning.pytorch"


def overrides_progress_bar_dict(module: Any) -> bool:
    """Whether ``module`` has a ``get_progress_bar_dict`` of its own (not only the mixin's default)."""
    if not isinstance(module, LegacyProgressBarDict):
        return False
    return getattr(type(module), "get_progress_bar_dict", None) is not LegacyProgressBarDict.get_progress_bar_dict


class RunningLoss1x:
    """1.x's ``TensorRunningAccum``: the last :data:`WINDOW` losses in one tensor, their mean as 1.x took it."""

    def __init__(self) -> None:
        self.memory: Any = None
        self.current = 0
        self.count = 0

    def append(self, loss: Any) -> None:
        import torch

        if self.memory is None:
            self.memory = torch.zeros(WINDOW, *loss.shape, device=loss.device, dtype=loss.dtype)
        with torch.no_grad():
            self.memory[self.current] = loss
        self.current = (self.current + 1) % WINDOW
        self.count = min(self.count + 1, WINDOW)

    def mean(self) -> Any:
        if self.memory is None:
            return None
        return (self.memory if self.count == WINDOW else self.memory[: self.count]).float().mean()


def recorder_class(namespace: str) -> type:
    """The loss recorder, a ``Callback`` of ``namespace`` (made once per tree, and reachable by its name for
    pickling)."""
    if namespace in _RECORDER_CLASSES:
        return _RECORDER_CLASSES[namespace]
    callback = importlib.import_module(f"{namespace}.callbacks").Callback

    def on_train_batch_end(self: Any, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        import torch

        # 1.x appended each optimization step's loss under automatic optimization only (its optimizer loop did; the
        # manual loop did not). 2.x hands the callbacks {"loss": loss / accumulate_grad_batches, ...}; 1.x appended
        # the same value times accumulate_grad_batches, as a float (its accumulated loss's float mean).
        if not pl_module.automatic_optimization or not isinstance(outputs, dict):
            return
        loss = outputs.get("loss")
        if isinstance(loss, torch.Tensor):
            self.losses.append(loss.detach().float() * trainer.accumulate_grad_batches)

    def __init__(self: Any) -> None:
        callback.__init__(self)
        self.losses = RunningLoss1x()

    name = f"LegacyRunningLoss_{namespace.replace('.', '_')}"
    cls = type(name, (callback,), {"__init__": __init__, "on_train_batch_end": on_train_batch_end})
    cls.__module__ = __name__
    cls.__qualname__ = name
    globals()[name] = cls
    _RECORDER_CLASSES[namespace] = cls
    return cls


def _recorder(trainer: Any, namespace: str) -> Any:
    for callback in getattr(trainer, "callbacks", []):
        if isinstance(callback, recorder_class(namespace)):
            return callback
    return None


def _get_metrics_1x(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_metrics(self: Any, trainer: Any, pl_module: Any) -> Any:
        if not overrides_progress_bar_dict(pl_module):
            return original(self, trainer, pl_module)  # any other module: 2.x's metrics, untouched
        # 1.x's ProgressBarBase.get_metrics / trainer.progress_bar_dict: the module's dict, the prog_bar metrics over it
        return {**pl_module.get_progress_bar_dict(), **trainer.progress_bar_metrics}

    setattr(get_metrics, _WRAPPED, True)
    return get_metrics


def attach(module: Any) -> None:
    """While a Trainer runs ``module``: its loss recorder first among the callbacks and Lightning's
    ``ProgressBar.get_metrics`` showing ``module.get_progress_bar_dict()``; nothing where the module has no override
    of its own."""
    trainer = getattr(module, "_trainer", None)
    if trainer is None or not overrides_progress_bar_dict(module):
        return
    namespace = instance_namespace(module)
    callbacks = trainer.callbacks
    recorder = _recorder(trainer, namespace) or recorder_class(namespace)()
    if recorder in callbacks:
        callbacks.remove(recorder)
    callbacks.insert(0, recorder)
    bar = importlib.import_module(f"{namespace}.callbacks.progress.progress_bar").ProgressBar
    if not getattr(bar.get_metrics, _WRAPPED, False):
        bar.get_metrics = _get_metrics_1x(bar.get_metrics)


def _attaching(setup: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(setup)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        attach(self)
        return setup(self, *args, **kwargs)

    setattr(run, _WRAPPED, True)
    return run


class LegacyProgressBarDict:
    """Mixin (last among a LightningModule's bases) that shows the module's ``get_progress_bar_dict()`` in the
    progress bar and gives its ``super().get_progress_bar_dict()`` 1.x's default; see the module's docstring.

    Example::

        class Model(LightningModule, LegacyProgressBarDict):
            def get_progress_bar_dict(self):  # 1.x's hook, kept as it was
                items = super().get_progress_bar_dict()
                items.pop("v_num", None)
                return items
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Decision: wrap the setup the class has (its own, or the one it inherits where no class above it has the
        # wrapper yet): the attach runs first whatever the user's setup does. A setup that is not a plain function
        # (a staticmethod, a descriptor) is left alone.
        setup = cls.__dict__.get("setup", getattr(cls, "setup", None))
        if inspect.isfunction(setup) and not getattr(setup, _WRAPPED, False):
            cls.setup = _attaching(setup)  # type: ignore[attr-defined]

    def get_progress_bar_dict(self) -> dict[str, Any]:
        """1.x's default: ``loss`` (the mean of the last 20 training losses, ``"nan"`` before the first one under
        automatic optimization) and ``v_num`` (the logger's version)."""
        trainer = self.trainer  # type: ignore[attr-defined]
        namespace = instance_namespace(self)
        items: dict[str, Any] = {}
        recorder = _recorder(trainer, namespace)
        mean = recorder.losses.mean() if recorder is not None else None
        if mean is not None:
            items["loss"] = f"{mean.cpu().item():.3g}"
        elif self.automatic_optimization:  # type: ignore[attr-defined]
            items["loss"] = f"{float('nan'):.3g}"
        standard = importlib.import_module(f"{namespace}.callbacks.progress.progress_bar").get_standard_metrics
        items.update(standard(trainer))  # v_num, by 1.6's rule
        return items
