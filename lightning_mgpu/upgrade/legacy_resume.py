"""Lightning 1.x's ``Trainer(resume_from_checkpoint=X)``, for converted scripts whose fit the tool cannot see.

2.0 removed the argument: the checkpoint is given to ``trainer.fit(model, ckpt_path=X)``. ``lightning-mgpu upgrade``
moves it there where the Trainer's ``fit`` calls are in the function that builds it (rule ``trainer-resume``).
Where they are not (a function or a classmethod builds and returns the Trainer, and its caller, maybe in another
file, fits it), the tool writes ``legacy_resume(Trainer(...), X)``: the checkpoint stays with the Trainer object,
and its fit resumes from it as 1.x's did, wherever that fit is called.

What 1.x did with the value (1.4 to 1.9; the ``fit`` method's ``ckpt_path`` parameter came in 1.5):

- ``fit`` resumed from it: ``ckpt_path = ckpt_path or self.resume_from_checkpoint`` (1.5-1.9), so a fit given its
  own ``ckpt_path`` loaded that one instead;
- once: the fit that loaded it forgot it (``resume_end``), so a second fit of the same Trainer started from the
  weights the first left (1.5-1.9 forgot it only where that fit had used it);
- ``validate``, ``test``, ``predict`` and the tuner's runs never read it (2.x's ``trainer.ckpt_path = X`` differs
  there: it makes them load X too);
- None (the default) or an empty value: no resume.

1.0-1.3 differ in one case: they restored the checkpoint at every ``fit`` of the Trainer, not the first only (and
1.0 in ``test`` too, whose run went through ``fit``'s training setup; 1.1-1.3 restored in the training path only). A
script that fits one Trainer once, the usual shape, gets the same run from every release.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, TypeVar

__all__ = ["legacy_resume"]

_TrainerT = TypeVar("_TrainerT")


def legacy_resume(trainer: _TrainerT, checkpoint_path: str | os.PathLike[str] | None) -> _TrainerT:
    """Give ``trainer``'s next ``fit`` the checkpoint that 1.x's ``Trainer(resume_from_checkpoint=...)`` resumed
    from (module docstring).

    Args:
        trainer: a 2.x Trainer, as the converted script builds it.
        checkpoint_path: what the 1.x script passed as ``resume_from_checkpoint`` (a path or URL; None or empty for
            no resume).

    Returns:
        ``trainer`` itself, whose next ``fit`` without a ``ckpt_path`` of its own (or with ``ckpt_path=None``)
        resumes from ``checkpoint_path``, once; a fit given another ``ckpt_path`` loads that one and leaves the
        resume for the next. The tuner's own fits (``Tuner(trainer).lr_find``, ``.scale_batch_size``) pass by it.
    """
    if checkpoint_path:  # 1.x: None, the default, was "do not resume"; 1.4+ skipped an empty value too
        # An instance attribute before the class's method: the object is the Trainer's own, and picklable (a spawn
        # launcher pickles the Trainer) as long as the Trainer is.
        trainer.fit = _ResumingFit(trainer, checkpoint_path)  # type: ignore[attr-defined]
    return trainer


class _ResumingFit:
    """``trainer.fit`` while a 1.x resume is pending: the class's ``fit``, given the checkpoint where it is not given
    one, then the Trainer's own ``fit`` again."""

    def __init__(self, trainer: Any, checkpoint_path: str | os.PathLike[str]) -> None:
        self.trainer = trainer
        self.checkpoint_path = checkpoint_path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        trainer = self.trainer
        fit = type(trainer).fit
        if _tuner_run(trainer):
            # Tuner(trainer).lr_find / scale_batch_size call trainer.fit with their finder callback: 1.x's tuner ran
            # its own loop, which never read resume_from_checkpoint; the resume waits for the script's fit.
            return fit(trainer, *args, **kwargs)
        bound = inspect.signature(fit).bind(trainer, *args, **kwargs)
        if bound.arguments.get("ckpt_path") is None:
            # 1.5-1.9: ckpt_path or resume_from_checkpoint; the fit that loads it forgets it (resume_end).
            bound.arguments["ckpt_path"] = self.checkpoint_path
            vars(trainer).pop("fit", None)
        # A fit given its own checkpoint loads that one, and the resume stays for the next (1.5-1.9 forgot it only
        # where the fit had loaded it).
        return fit(*bound.args, **bound.kwargs)


def _tuner_run(trainer: Any) -> bool:
    """Whether ``trainer.fit`` is being called by 2.x's Tuner: it puts its ``BatchSizeFinder`` or
    ``LearningRateFinder`` first among the callbacks, marked ``_early_exit`` (a callback a script adds itself is not),
    for the length of that fit."""
    return any(getattr(callback, "_early_exit", False) is True for callback in getattr(trainer, "callbacks", ()))
