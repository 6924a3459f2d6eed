"""``Trainer(weights_save_path=X)`` -> ``default_root_dir=X`` where that is all X did (rule
``trainer-weights-save-path``).

1.x's ``weights_save_path`` did two things: (1) a ModelCheckpoint without a folder of its own saved under X, and
(2) SLURM's pre-emption checkpoint (``hpc_ckpt_N.ckpt``) was saved to X and restored from X when a fit started. 2.x
saves and restores (2) in ``default_root_dir``. So where (1) cannot happen and nothing else reads
``default_root_dir``, ``default_root_dir=X`` is the same run:

- every ModelCheckpoint among the call's ``callbacks=`` has its folder (``dirpath=``/``filepath=`` given a path that
  is not empty: a non-empty literal, an ``os.path.join(...)``, an f-string, or a name given only such values), and
  there is one, so no default ModelCheckpoint (which had no folder) is added; every other callback is Lightning's own
  (one the tool knows has no folder to take from X);
- ``logger=`` is a logger object (or a list of them): 2.x's default logger and ``trainer.log_dir`` would otherwise
  move from 1.x's working directory to X;
- the call has no ``default_root_dir`` (1.x kept the two apart), and the file never spells ``default_root_dir``
  elsewhere (a script or module reading ``trainer.default_root_dir`` would see X, where 1.x gave the working
  directory).

Anywhere else the TODO stays (:func:`~lightning_mgpu.upgrade.trainer_rewrite.rewrite_trainer_args`'s removed
arguments).
"""

from __future__ import annotations

import libcst as cst

from lightning_mgpu.upgrade.scopes import dotted
from lightning_mgpu.upgrade.scopes import literal as _literal
from lightning_mgpu.upgrade.trainer_kwargs import TrainerArgs

#: Lightning's callbacks that take no folder from weights_save_path (ModelCheckpoint is checked on its own).
FOLDERLESS_CALLBACKS = frozenset(
    {
        "EarlyStopping",
        "LearningRateMonitor",
        "LearningRateLogger",
        "TQDMProgressBar",
        "RichProgressBar",
        "ProgressBar",
        "ModelSummary",
        "RichModelSummary",
        "GPUStatsMonitor",
        "DeviceStatsMonitor",
        "StochasticWeightAveraging",
        "Timer",
        "GradientAccumulationScheduler",
        "LambdaCallback",
    }
)


def weights_save_path(args: TrainerArgs, spelled: bool) -> None:
    """``weights_save_path=X`` -> ``default_root_dir=X`` where the call shows that only SLURM's checkpoint took X
    (module docstring); ``spelled``: whether the file spells ``default_root_dir`` anywhere."""
    value = args.get("weights_save_path")
    if value is None or args.has("default_root_dir") or spelled:
        return
    if not _explicit_logger(args, args.get("logger")) or not _every_checkpoint_has_its_folder(args):
        return
    args.replace("weights_save_path", [("default_root_dir", value)])
    args.change(
        "trainer-weights-save-path",
        "weights_save_path -> default_root_dir (every ModelCheckpoint has its folder: only SLURM's checkpoint used it)",
    )


def _calls(args: TrainerArgs, node: cst.BaseExpression) -> list[cst.Call] | None:
    """The calls a value is (a call, or a name every assignment gave a call), None where it is anything else."""
    if isinstance(node, cst.Call):
        return [node]
    values = args.assigned(node)
    if values and all(isinstance(v, cst.Call) for v in values):
        return values  # type: ignore[return-value]
    return None


def _name(call: cst.Call) -> str:
    return (dotted(call.func) or "").rsplit(".", 1)[-1]


def _explicit_logger(args: TrainerArgs, logger: cst.BaseExpression | None) -> bool:
    """``logger=`` a ``...Logger(...)`` object, or a list of them (directly or through a name)."""
    if logger is None:
        return False
    elements = [e.value for e in logger.elements] if isinstance(logger, cst.List) else [logger]
    for element in elements:
        calls = _calls(args, element)
        if not calls or not all(_name(c).endswith("Logger") for c in calls):
            return False
    return bool(elements)


def _every_checkpoint_has_its_folder(args: TrainerArgs) -> bool:
    callbacks = args.get("callbacks")
    if not isinstance(callbacks, cst.List):
        return False
    found = False
    for element in callbacks.elements:
        if isinstance(element, cst.StarredElement):
            return False
        calls = _calls(args, element.value)
        if calls is None:
            return False
        for call in calls:
            name = _name(call)
            if name == "ModelCheckpoint":
                if not _has_folder(args, call):
                    return False
                found = True
            elif name not in FOLDERLESS_CALLBACKS:
                return False  # a callback of the script's own (a ModelCheckpoint subclass may take X)
    return found  # none: 1.x's default ModelCheckpoint, without a folder, saved under X


def _has_folder(args: TrainerArgs, call: cst.Call) -> bool:
    """``ModelCheckpoint(dirpath=P)`` / ``(filepath=P)`` / ``(P, ...)`` with a P that is not empty when it runs."""
    for arg in call.args:
        if arg.star:
            return False  # a ** may hold anything
    folder = next(
        (a.value for a in call.args if (a.keyword is None) or a.keyword.value in ("dirpath", "filepath")),
        None,
    )
    return folder is not None and _not_empty(args, folder)


def _not_empty(args: TrainerArgs, node: cst.BaseExpression) -> bool:
    value = _literal(node)
    if isinstance(value, str):
        return bool(value)
    if isinstance(node, cst.FormattedString):
        return any(isinstance(part, cst.FormattedStringText) and part.value for part in node.parts)
    if isinstance(node, cst.Call):
        # Decision: os.path.join(a, b, ...) is a path: it is empty only where every part is an empty string, which
        # a script that builds a checkpoint folder from its settings does not pass.
        return dotted(node.func) in ("os.path.join", "path.join") and bool(node.args)
    if isinstance(node, cst.Name):
        values = args.assigned(node)
        return bool(values) and all(_not_empty(args, v) for v in values or ())
    return False
