"""A bounded rendezvous: a process that cannot reach the main address, or waits for a node that never starts, fails
within a set time with the address named, instead of torch's default of 30 minutes of silence.

Lightning passes its DDP-family strategy's ``timeout`` to ``init_process_group``. There it bounds the TCPStore
connection (ranks > 0 reach ``MASTER_ADDR:MASTER_PORT``), rank 0's wait for every rank to join, and afterwards
every collective. :class:`RendezvousTimeout` lowers it for the rendezvous only, and gives the new process group its
collective timeout back in ``setup``: a rank that waits at a barrier while rank 0 writes a large checkpoint to
a slow disk must not fail at 120 s.

torchrun's own rendezvous (``--rdzv-endpoint``) is bounded by torchrun: ``--rdzv-conf read_timeout=S``
(60 s by default) for an endpoint it cannot reach, ``join_timeout=S`` (600 s) for nodes that do not come.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

# Seconds allowed to reach the main address and for every process to join (``--rdzv-timeout``): defined with the
# package, where command lines read it without importing Lightning.
from lightning_mgpu.launchers import DEFAULT_RENDEZVOUS_TIMEOUT_S
from lightning_mgpu.utilities.child_observer import child_observer_paused

# torch's default for gloo collectives (and Lightning's when a strategy is given no timeout).
_DEFAULT_COLLECTIVE_TIMEOUT = timedelta(minutes=30)


class RendezvousTimeoutError(RuntimeError):
    """The processes of a job did not all meet at the main address within the rendezvous timeout."""


class RendezvousTimeout(Callback):
    """Bound the process-group rendezvous of a DDP-family strategy; keep the collective timeout as it was.

    Call :meth:`apply` on the Trainer's strategy before ``fit`` and pass the callback to the Trainer. A failed
    rendezvous raises torch's ``DistNetworkError`` (cannot connect) or ``DistStoreError`` (not every rank
    joined); :meth:`explain` turns either into a :class:`RendezvousTimeoutError` that names the address and the fix.

    Args:
        seconds: how long a process may take to reach ``MASTER_ADDR:MASTER_PORT`` and for all processes to join.

    Raises:
        ValueError: ``seconds`` is not positive.

    Example::

        rendezvous = RendezvousTimeout(seconds=120)
        trainer = pl.Trainer(strategy="ddp", num_nodes=2, callbacks=[rendezvous])
        rendezvous.apply(trainer.strategy)
        try:
            trainer.fit(model)
        except Exception as exc:
            raise rendezvous.explain(exc) or exc
    """

    def __init__(self, seconds: float = DEFAULT_RENDEZVOUS_TIMEOUT_S) -> None:
        if not seconds > 0:
            raise ValueError(f"the rendezvous timeout must be a positive number of seconds, got {seconds!r}")
        self.seconds = float(seconds)
        self._collective_timeout: timedelta | None = None
        self.connected = False

    def apply(self, strategy: Any) -> bool:
        """Give ``strategy`` the rendezvous bound as its process-group timeout; whether it takes one.

        Strategies without a torch process group of their own (``dp``, ``horovod``, single device) are left alone.
        """
        if not hasattr(strategy, "_timeout"):
            return False
        # Lightning keeps the DDP-family `timeout` argument here and passes it to init_process_group.
        self._collective_timeout = strategy._timeout or _DEFAULT_COLLECTIVE_TIMEOUT
        strategy._timeout = timedelta(seconds=self.seconds)
        self._pause_child_observer_during_rendezvous(strategy)
        return True

    @staticmethod
    def _pause_child_observer_during_rendezvous(strategy: Any) -> None:
        """The rendezvous happens in ``strategy.setup_environment``, after Lightning's launcher has started the other
        ranks and its child observer. Each rank fails it within the bound on its own and says why; the observer must
        not SIGKILL the launching rank in between because another rank said so first (found as 1 of 2 messages on a
        loaded machine). Wraps this instance's ``setup_environment``; no class is changed."""
        if type(getattr(strategy, "launcher", None)).__name__ != "_SubprocessScriptLauncher":
            # Only Lightning's script launcher starts ranks with an observer; a spawn launcher pickles the strategy,
            # which must then carry no wrapper of its own.
            return
        setup_environment = strategy.setup_environment

        def setup_environment_with_every_rank_heard() -> None:
            with child_observer_paused(getattr(strategy, "launcher", None)):
                setup_environment()

        strategy.setup_environment = setup_environment_with_every_rank_heard

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # The group exists (setup runs after the strategy's setup_environment): collectives get their timeout back,
        # and so do groups the strategy creates later (sharded's, FSDP2's mesh).
        self.connected = True
        if self._collective_timeout is None:
            return
        import torch.distributed as dist

        trainer.strategy._timeout = self._collective_timeout  # type: ignore[attr-defined]  # DDP-like strategies' own
        if dist.is_available() and dist.is_initialized():
            from torch.distributed.distributed_c10d import _set_pg_timeout

            _set_pg_timeout(self._collective_timeout)

    def explain(self, exc: BaseException, rank: int | None = None) -> RendezvousTimeoutError | None:
        """A :class:`RendezvousTimeoutError` for a rendezvous failure in this process, else ``None``.

        Args:
            exc: what ``fit`` raised.
            rank: this process's global rank (``trainer.global_rank``), named in the message.
        """
        cause = None if self.connected else _rendezvous_error(exc)
        if cause is None:
            return None
        # Lightning has exported the address it used by the time the rendezvous runs.
        address = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        who = f" (this process: global rank {rank})" if rank is not None else ""
        detail = " ".join(str(cause).split())[:300].rstrip(".")
        return RendezvousTimeoutError(
            f"the processes of this job did not meet at {address} (MASTER_ADDR:MASTER_PORT) within the"
            f" {self.seconds:g} s rendezvous timeout{who}. torch said: {detail}."
            " Check that node 0 was started and listens there, that every node can reach that host and port"
            " (firewall, the address of the right interface), and that every node was started with the same"
            " --num-nodes; or allow more time with --rdzv-timeout SECONDS."
        )


def _rendezvous_error(exc: BaseException | None) -> BaseException | None:
    """torch's connection or store timeout in ``exc``'s chain, if there is one."""
    import torch.distributed as dist

    kinds = tuple(k for k in (getattr(dist, "DistNetworkError", None), getattr(dist, "DistStoreError", None)) if k)
    seen = 0
    while exc is not None and seen < 8:  # Lightning or a launcher may wrap it; the chain is short
        if kinds and isinstance(exc, kinds):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
