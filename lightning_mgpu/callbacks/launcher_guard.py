"""Refuse, before training, a strategy that contradicts the launcher that started the job.

Lightning 1.x chose Horovod by itself under ``horovodrun``. Lightning 2.x does not: with no ``strategy`` each
``horovodrun`` worker trains alone (world size 1, unsynchronised models, every worker writing the same
checkpoints). And ``strategy="dp"`` under ``torchrun`` makes every process drive every GPU. Lightning offers no
hook to pick a strategy from the environment, but it loads callbacks from the ``lightning.pytorch.callbacks_factory``
entry point into every Trainer: lightning_mgpu's factory (:mod:`lightning_mgpu.callbacks.factory`) adds
:class:`LauncherGuard` only when a launcher's environment is present.
"""

from __future__ import annotations

import os

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from typing_extensions import override

from lightning_mgpu.utilities.capabilities import capability


def _horovodrun_size() -> int:
    """Workers that horovodrun (or horovod.run) started, from its environment; 0 outside it."""
    size = os.environ.get("HOROVOD_SIZE")
    return int(size) if size and size.isdigit() and "HOROVOD_RANK" in os.environ else 0


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def _name(strategy: object) -> str:
    # By the registered name each bundle class declares: callbacks never import strategies.
    return getattr(type(strategy), "strategy_name", None) or type(strategy).__name__


class LauncherGuard(Callback):
    """Fails ``setup`` with the fix when the strategy contradicts the launcher (see the module docstring).

    Raises:
        MisconfigurationException: under horovodrun with a strategy whose ranks are not horovodrun's workers; under
            torchrun with several processes per node and a strategy whose one process loads the node's batch (``dp``).
    """

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        name = _name(trainer.strategy)
        workers = _horovodrun_size()
        if workers > 1 and not capability(trainer.strategy, "runs_under_horovodrun"):
            raise MisconfigurationException(
                f"This process is one of {workers} workers started by horovodrun, but the Trainer uses {name}"
                f" (world size {trainer.world_size}): each worker would train alone on its own copy of the model and"
                ' all of them would write the same checkpoints. Pass `Trainer(strategy="horovod")` (with'
                " `import lightning_mgpu`), or launch without horovodrun."
            )
        local = os.environ.get("LOCAL_WORLD_SIZE", "?")
        if _under_torchrun() and not capability(trainer.strategy, "syncs_across_processes"):
            raise MisconfigurationException(
                f"strategy='{name}' under torchrun ({local} process(es) on this node): {name} trains in one process and"
                " talks to no other, so every process torchrun starts would train its own copy of the model, each"
                ' driving every GPU of its node. Use `strategy="ddp"` (one GPU per process) under torchrun, or run'
                f" `python train.py --strategy {name}` without torchrun."
            )
        if _under_torchrun() and capability(trainer.strategy, "loads_node_batch") and local != "1":
            raise MisconfigurationException(
                f"strategy='{name}' under torchrun ({local} process(es) on this node): one {name} process drives every"
                ' device of its node, so torchrun\'s processes would each drive all of them. Use `strategy="ddp"` (one'
                " device per process), start one process per node (torchrun --nproc-per-node 1), or run"
                f" `python train.py --strategy {name}` without torchrun."
            )


def launcher_environment_present() -> bool:
    """Whether horovodrun (several workers) or torchrun started this process: only then is the guard added."""
    return _horovodrun_size() > 1 or _under_torchrun()
