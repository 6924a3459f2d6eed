"""Self-launch for ``Trainer(strategy="horovod", devices=N)`` where there is no script to run again (a notebook).

With ``HorovodStrategy(start_method="run")`` (the default only where :mod:`.script_launcher` cannot run the
script again), :class:`_HorovodLauncher` starts the N workers on this machine with
Horovod's Python API (``horovod.run``, Gloo controller), the way ``ddp_spawn`` starts its
processes: each worker unpickles the Trainer and runs the fit/validate/test function, and rank
0's results (final weights, ``callback_metrics``, trainer state, the checkpoint callback's
paths, loop progress) come back to the main process. ``horovod.run`` ships the function with
cloudpickle and starts fresh interpreters (``python -m horovod.runner.run_task``), so unlike
``spawn`` the script is not re-imported and needs no ``if __name__ == "__main__"`` guard
(see :func:`_main_module_hidden`).

When one worker fails, ``horovod.run`` terminates the others and the main process raises.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lightning.fabric.utilities import move_data_to_device
from lightning.fabric.utilities.distributed import _set_num_threads_if_needed
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies.launchers.multiprocessing import (
    _GlobalStateSnapshot,
    _MultiProcessingLauncher,
    _WorkerOutput,
)
from lightning.pytorch.trainer.connectors.signal_connector import _SIGNUM
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from typing_extensions import override

from lightning_mgpu.strategies.horovod import runtime
from lightning_mgpu.utilities.signals import restored_signal_handlers

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_mgpu.strategies.horovod.strategy import HorovodStrategy

log = logging.getLogger(__name__)

# ModelCheckpoint state that Lightning's own spawn launcher does not carry back (it returns only
# best_model_path); train scripts commonly print or reuse these after fit.
_CHECKPOINT_ATTRS = ("best_model_path", "best_model_score", "best_k_models", "kth_best_model_path", "last_model_path")


class HorovodLaunchError(RuntimeError):
    """A self-launched Horovod worker failed; the whole job was stopped."""


class _HorovodLauncher(_MultiProcessingLauncher):
    """Start ``strategy.num_processes`` Horovod workers on localhost through ``horovod.run``.

    Reuses the result plumbing of Lightning's ``_MultiProcessingLauncher`` (rank 0's weights are
    saved to a temporary file and loaded in the main process; ``callback_metrics`` travel as
    bytes) and adds the checkpoint callback's paths and the loops' progress.

    Args:
        strategy: the :class:`~lightning_mgpu.strategies.HorovodStrategy` being launched.
        start_timeout: seconds Horovod may take to start and connect the workers.
    """

    def __init__(self, strategy: HorovodStrategy, start_timeout: int | None = None) -> None:
        super().__init__(strategy, start_method="spawn")
        self._start_timeout = start_timeout

    @property
    @override
    def is_interactive_compatible(self) -> bool:
        # cloudpickle ships functions and classes defined in a notebook by value.
        return True

    @override
    def launch(self, function: Callable, *args: Any, trainer: pl.Trainer | None = None, **kwargs: Any) -> Any:
        """Run ``function`` in every worker and return rank 0's return value.

        Raises:
            HorovodLaunchError: a worker exited with an error (its traceback is printed above,
                prefixed by ``[rank]<stderr>``).
        """
        if self._already_fit and trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            raise NotImplementedError(
                "Calling `trainer.fit()` twice on the same Trainer with the self-launched Horovod strategy is"
                " not supported. Create a new Trainer and pass `fit(ckpt_path=...)` to continue training."
            )
        hvd = runtime.horovod_torch()
        runtime.check_controller(hvd, "gloo")
        import cloudpickle  # a horovod dependency
        from horovod.runner import run as horovod_run

        n = self._strategy.num_processes
        # Serialized here, while __main__ is the user's script: classes defined there travel by value.
        try:
            payload = cloudpickle.dumps((self, trainer, function, args, kwargs, _GlobalStateSnapshot.capture()))
        except (TypeError, AttributeError, pickle.PicklingError) as err:
            model = trainer.lightning_module if trainer is not None else None
            raise HorovodLaunchError(
                f"HorovodStrategy(start_method='run') sends the Trainer and {type(model).__name__ if model else 'the model'}"
                f" to its {n} workers by pickling, and they cannot be pickled ({type(err).__name__}: {err}). FairScale's"
                " checkpoint_wrapper is a known cause. Run the code as a script, where every worker runs it again and"
                " nothing is pickled (start_method='script', the default for scripts, or horovodrun -np N --gloo python"
                " train.py), or replace checkpoint_wrapper with lightning_mgpu's ActivationCheckpointing callback, which"
                " wraps the model inside each worker."
            ) from err
        rank_zero_info(f"HorovodStrategy: starting {n} workers on localhost with horovod.run (Gloo)")
        try:
            with _worker_environment(), restored_signal_handlers(), _main_module_hidden():
                results = horovod_run(
                    _run_worker,
                    args=(payload,),
                    num_proc=n,
                    hosts=f"localhost:{n}",
                    use_gloo=True,
                    start_timeout=self._start_timeout,
                )
        except RuntimeError as err:
            raise HorovodLaunchError(
                f"A Horovod worker failed, so all {n} workers were stopped: {err}. The worker's traceback is"
                " printed above (lines prefixed with `[rank]<stderr>:`)."
            ) from err
        worker_output = results[0]
        if trainer is None:
            return worker_output
        self._already_fit |= trainer.state.fn == TrainerFn.FITTING
        self._recover_results_in_main_process(worker_output, trainer)
        return worker_output.trainer_results

    @override
    def get_extra_results(self, trainer: pl.Trainer) -> dict[str, Any]:
        extra = super().get_extra_results(trainer)
        extra["checkpoint_callbacks"] = [
            {a: getattr(cb, a) for a in _CHECKPOINT_ATTRS if hasattr(cb, a)}
            for cb in trainer.callbacks
            if isinstance(cb, ModelCheckpoint)
        ]
        if trainer.state.fn == TrainerFn.FITTING:
            extra["fit_loop"] = trainer.fit_loop.state_dict()
        return extra

    @override
    def update_main_process_results(self, trainer: pl.Trainer, extra: dict[str, Any]) -> None:
        super().update_main_process_results(trainer, extra)
        callbacks = [cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)]
        for cb, state in zip(callbacks, extra.get("checkpoint_callbacks", [])):
            for attr, value in state.items():
                setattr(cb, attr, value)
        if "fit_loop" in extra:
            # So trainer.global_step / current_epoch in the main process match the workers'.
            trainer.fit_loop.load_state_dict(extra["fit_loop"])

    @override
    def kill(self, signum: _SIGNUM) -> None:
        # horovod.run's own SIGINT/SIGTERM handler stops the workers it started.
        log.debug("HorovodStrategy: workers are stopped by horovod.run's signal handler")


def _run_worker(payload: bytes) -> _WorkerOutput | None:
    """Entry point of every self-launched worker (runs inside ``horovod.run``)."""
    import cloudpickle

    launcher, trainer, function, args, kwargs, global_states = cloudpickle.loads(payload)
    global_states.restore()
    _set_num_threads_if_needed(num_processes=launcher._strategy.num_processes)
    results = function(*args, **kwargs)
    if trainer is not None:
        results = launcher._collect_rank_zero_results(trainer, results)
    rank = int(os.environ.get("HOROVOD_RANK", "0"))
    return move_data_to_device(results, "cpu") if rank == 0 else None


@contextmanager
def _worker_environment() -> Iterator[None]:
    """Give the workers this interpreter's ``sys.path``.

    A script's own modules (``from mymodel import Net``) are importable here because the script's
    folder is on ``sys.path``; the workers start as ``python -m horovod.runner.run_task`` in the
    current directory and must find them to unpickle the model.
    """
    saved = os.environ.get("PYTHONPATH")
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    if saved:
        paths.append(saved)
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Keep ``horovod.run``'s helper processes from re-running the user's script.

    ``horovod.run`` starts one small "middleman" process per worker with multiprocessing's *spawn*
    method, which re-imports ``__main__`` in the child: a script without an
    ``if __name__ == "__main__"`` guard would start training again in there, and one with a guard
    still pays its imports (torch, Lightning) once per worker. The middlemen only run Horovod's own
    code, so while they start, ``__main__`` is an empty module. The training payload was serialized
    before, with the real ``__main__``.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
