"""The spawn launcher of the bundle's ``*_spawn`` strategies: Lightning's, whose workers end with ``os._exit(0)`` once
their results are delivered (a workaround: :func:`~lightning_mgpu.utilities.process_group.end_after_success` says of
what, and when it can go). A worker that raised exits the usual way, and torch.multiprocessing reports its error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from lightning.pytorch.strategies.launchers.multiprocessing import (
    _MultiProcessingLauncher,
    _WorkerOutput,
)
from lightning.pytorch.trainer.states import TrainerFn
from torch.multiprocessing import ProcessRaisedException
from typing_extensions import override

from lightning_mgpu.utilities.failures import first_failure, record_failure
from lightning_mgpu.utilities.process_group import end_after_success
from lightning_mgpu.utilities.signals import interrupts_to_workers


class CleanExitSpawnLauncher(_MultiProcessingLauncher):
    """``_MultiProcessingLauncher`` whose workers end with ``os._exit(0)`` once their results are delivered, whose
    launching process leaves a first Ctrl-C to the workers (they save and stop: ``SaveOnInterrupt``), and which reports
    the worker that failed first.

    torch.multiprocessing reports the first failed worker *it sees exit*. When one rank raises, another rank's
    collective breaks with "Connection closed by peer" and that rank may finish exiting sooner, so the job reported a
    broken connection instead of the error. Each worker records its failure with the time it happened, and the
    launching process reports the earliest.
    """

    _failures: str | None = None  # the folder the workers record their failures in (set before they start)

    @override
    def launch(self, function: Callable, *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        # What the strategy refuses at setup, refused here too, before any worker starts (check_before_launch).
        check = getattr(self._strategy, "check_before_launch", None)
        if trainer is not None and check is not None:
            check(trainer)
        self._failures = tempfile.mkdtemp(prefix="lightning_mgpu-failures-")
        try:
            with interrupts_to_workers():
                return super().launch(function, *args, trainer=trainer, **kwargs)
        except ProcessRaisedException as reported:
            first = first_failure(self._failures)
            if first is None or first.rank == reported.error_index:
                raise
            pid = (self.procs[first.rank].pid if first.rank < len(self.procs) else None) or -1
            raise ProcessRaisedException(
                f"\n\n-- Process {first.rank:d} failed first, with the following error (process"
                f" {reported.error_index:d} failed after it):\n{first.trace}",
                first.rank,
                pid,
            ) from None
        finally:
            shutil.rmtree(self._failures, ignore_errors=True)

    @override
    def _wrapping_function(self, process_idx: int, *args: Any, **kwargs: Any) -> None:
        try:
            super()._wrapping_function(process_idx, *args, **kwargs)
        except Exception:
            if self._failures is not None:
                record_failure(self._failures, process_idx)
            raise  # torch.multiprocessing reports it to the launching process
        end_after_success()  # results delivered: end now (the workaround, and when it can go: its docstring)

    @override
    def _collect_rank_zero_results(self, trainer: Any, results: Any) -> _WorkerOutput | None:
        handoff = getattr(self._strategy, "handoff_state_dict", None)
        if handoff is None:
            return super()._collect_rank_zero_results(trainer, results)
        # Lightning's own steps, with the weights from the strategy: under FSDP2 `module.state_dict()` holds DTensors,
        # which the launching process has no process group for (torch >= 2.7 refuses to load them there at all).
        state_dict = handoff()  # a collective under fsdp2: every rank takes part
        if self._strategy.local_rank != 0:
            return None
        callback = trainer.checkpoint_callback
        best_model_path = getattr(callback, "best_model_path", None) if callback else None
        weights_path = None
        if trainer.state.fn == TrainerFn.FITTING and state_dict:  # empty on the first rank of another node
            weights_path = os.path.join(tempfile.mkdtemp(), ".temp.ckpt")
            self._strategy.checkpoint_io.save_checkpoint(state_dict, weights_path)
        return _WorkerOutput(best_model_path, weights_path, trainer.state, results, self.get_extra_results(trainer))
