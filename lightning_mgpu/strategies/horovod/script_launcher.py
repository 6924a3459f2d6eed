"""Self-launch for ``Trainer(strategy="horovod", devices=N)`` from a plain ``python train.py``: the script runs again.

What ``horovodrun -np N --gloo`` does, from inside the script, the way Lightning's ``ddp`` starts its ranks: this
process becomes rank 0, starts Horovod's Gloo rendezvous server, and runs the same command line N-1 more times
with each worker's ``HOROVOD_*`` variables. Every worker builds its own Trainer and model, so nothing is pickled
(a model holding FairScale's ``checkpoint_wrapper`` trains), and each child sees what ``horovodrun`` would give it.

When one worker fails, the others are stopped and the job exits non-zero within seconds, naming the worker.
Notebooks and ``python -c`` have no script to run again: the strategy refuses ``devices > 1`` there, naming the
alternatives.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lightning.fabric.strategies.launchers.subprocess_script import _basic_subprocess_cmd, _hydra_subprocess_cmd
from lightning.fabric.utilities.distributed import _set_num_threads_if_needed
from lightning.pytorch.strategies import ParallelStrategy
from lightning.pytorch.strategies.launchers.subprocess_script import _HYDRA_AVAILABLE, _SubprocessScriptLauncher
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from typing_extensions import override

from lightning_mgpu.utilities.failures import describe_exit, wait_until_first_failure

if TYPE_CHECKING:
    import lightning.pytorch as pl

log = logging.getLogger(__name__)

# The rendezvous runs on this machine's loopback: the self-launch only starts workers here.
_ADDRESS, _IFACE = "127.0.0.1", "lo"
# How long this process waits at exit for workers still finishing (they run the same script, so seconds), and
# after a worker failed, for this process to end on its own error before it is stopped.
_EXIT_WAIT_S = 300.0
_FAILURE_GRACE_S = 10.0


def horovod_worker_env(rank: int, size: int, port: int, timeout_s: int | None = None) -> dict[str, str]:
    """The variables ``horovodrun -np size --gloo`` gives worker ``rank`` on one host (horovod 0.28's names)."""
    env = {
        "HOROVOD_HOSTNAME": "localhost",
        "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(rank),
        "HOROVOD_LOCAL_SIZE": str(size),
        "HOROVOD_CROSS_RANK": "0",
        "HOROVOD_CROSS_SIZE": "1",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": _ADDRESS,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": _IFACE,
        "NCCL_SOCKET_IFNAME": _IFACE,
    }
    if timeout_s is not None:
        env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(timeout_s)
    return env


class HorovodScriptLauncher(_SubprocessScriptLauncher):
    """Run the script N-1 more times as Horovod workers 1..N-1; this process is worker 0.

    Subclassing Lightning's script launcher keeps its behaviour where Lightning checks for it: on Ctrl-C the
    Trainer's interrupt handling stops the children after this process's own graceful shutdown.

    Args:
        strategy: the strategy being launched (:class:`~lightning_mgpu.strategies.HorovodStrategy`): its cluster
            environment and ``num_processes``.
        start_timeout: seconds the workers may take to meet at the rendezvous (``HOROVOD_GLOO_TIMEOUT_SECONDS``;
            Horovod's default is 30).
    """

    def __init__(self, strategy: ParallelStrategy, start_timeout: int | None = None) -> None:
        assert strategy.cluster_environment is not None
        super().__init__(strategy.cluster_environment, num_processes=len(strategy.parallel_devices or []), num_nodes=1)
        self._start_timeout = start_timeout
        self._rendezvous: Any = None
        self._failed = False
        self._stopped_on_purpose = False
        self._stopping = threading.Event()

    @override
    def launch(self, function: Callable, *args: Any, trainer: pl.Trainer | None = None, **kwargs: Any) -> Any:
        # A second fit/test on this Trainer runs in the workers started by the first.
        if self._rendezvous is None:
            self._start_workers()
        return function(*args, **kwargs)

    @override
    def kill(self, signum: Any) -> None:
        # Lightning stops the children after this process's graceful Ctrl-C; their exit is no worker failure.
        self._stopped_on_purpose = True
        self._stopping.set()
        super().kill(signum)

    def mark_failed(self) -> None:
        """This process is ending on an error: at exit, stop the workers instead of waiting for them."""
        self._failed = True

    def _start_workers(self) -> None:
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousServer

        from lightning_mgpu.strategies.horovod import runtime

        # Refused before any process starts: the workers meet over Gloo.
        runtime.check_controller(runtime.horovod_torch(), "gloo")
        n = self.num_processes
        # OMP_NUM_THREADS before the children start, so that they inherit it (each computes with cores / N).
        _set_num_threads_if_needed(num_processes=n)
        self._rendezvous = RendezvousServer()
        port = self._rendezvous.start()
        self._rendezvous.init(get_host_assignments(parse_hosts(f"localhost:{n}"), n))
        others = "rank 1" if n == 2 else f"ranks 1-{n - 1}"
        rank_zero_info(
            f"HorovodStrategy: starting {n} workers on localhost (this process is rank 0; the script runs again as"
            f" {others})"
        )
        for rank in range(1, n):
            env = {**os.environ, **horovod_worker_env(rank, n, port, self._start_timeout)}
            command, cwd = _hydra_subprocess_cmd(rank) if _hydra_in_use() else (_basic_subprocess_cmd(), None)
            self.procs.append(subprocess.Popen(command, env=env, cwd=cwd))
        # This process joins as rank 0: hvd.init() reads these when the strategy sets up.
        os.environ.update(horovod_worker_env(0, n, port, self._start_timeout))
        threading.Thread(target=self._watch_workers, name="horovod-worker-watch", daemon=True).start()
        atexit.register(self._at_exit)

    def _watch_workers(self) -> None:
        """Stop the job when a worker fails: the others, then (after a grace to fail on its own error) this one."""
        failed = wait_until_first_failure(self.procs, stop=self._stopping, poll_s=0.5)
        if failed is None:  # every worker ended well, or this process is exiting
            return
        rank, proc = failed + 1, self.procs[failed]
        assert proc.returncode is not None
        log.error(
            f"HorovodStrategy: worker rank {rank} (pid {proc.pid}) {describe_exit(proc.returncode)}. The job is"
            " stopped: the other workers now, this process (rank 0) if it has not ended within"
            f" {_FAILURE_GRACE_S:.0f} s."
        )
        self._failed = True
        super().kill(signal.SIGKILL)  # the survivors may hang in a collective; SIGTERM would not reach them there
        if not self._stopping.wait(_FAILURE_GRACE_S):
            os._exit(1)

    def _at_exit(self) -> None:
        self._stopping.set()
        if self._failed:
            super().kill(signal.SIGKILL)
        deadline = time.monotonic() + _EXIT_WAIT_S
        for rank, proc in enumerate(self.procs, start=1):
            try:
                code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error(
                    f"HorovodStrategy: worker rank {rank} (pid {proc.pid}) was still running {_EXIT_WAIT_S:.0f} s after"
                    " rank 0 ended; stopping it"
                )
                proc.kill()
                code = proc.wait()
            if code and not (self._failed or self._stopped_on_purpose):
                # A worker that failed after this process finished still fails the job.
                log.error(f"HorovodStrategy: worker rank {rank} (pid {proc.pid}) {describe_exit(code)}")
                self._failed = True
        if self._failed and not _exiting_with_error():
            os._exit(1)


def _hydra_in_use() -> bool:
    if not _HYDRA_AVAILABLE:
        return False
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.initialized()


def _exiting_with_error() -> bool:
    # At exit, an uncaught exception has already been reported and set the status; sys.last_value marks it.
    return getattr(sys, "last_value", None) is not None


def can_run_script_again() -> bool:
    """Whether ``__main__`` is a file or module that a child process can run again (not a notebook or ``-c``)."""
    from lightning.fabric.utilities.imports import _IS_INTERACTIVE

    import __main__

    return not _IS_INTERACTIVE and getattr(__main__, "__file__", None) is not None
