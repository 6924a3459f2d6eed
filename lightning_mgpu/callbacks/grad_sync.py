"""Skip gradient synchronization on non-final accumulation micro-batches, under every strategy."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import ParallelStrategy, Strategy
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch.nn import DataParallel
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override


class GradSyncToggle(Callback):
    """All-reduce gradients once per optimizer step instead of once per micro-batch.

    What Lightning 2.6 does not do: it skips the gradient all-reduce of non-final accumulation micro-batches
    only when the model is wrapped in torch ``DistributedDataParallel`` and only in automatic optimization;
    ``LightningOptimizer.toggle_model(sync_grad=False)`` has the same limit, and manual optimization that
    accumulates by hand all-reduces on every ``manual_backward``.

    How: every strategy of this bundle implements ``ParallelStrategy.block_backward_sync()`` (``sharded``:
    ``ShardedDataParallel.no_sync``; ``horovod``: its ``DistributedOptimizer`` skip logic; ``dp``: a
    documented no-op, since one process has nothing to synchronize), and Lightning's loop and
    ``toggle_model(sync_grad=...)`` call it. This callback is the switch on top:

    - automatic optimization: checks that the strategy can skip synchronization (Lightning's loop then does
      it with ``trainer.accumulate_grad_batches``); for a strategy whose model wrapper has ``no_sync()`` but
      which does not implement ``block_backward_sync`` (e.g. a third-party strategy), it installs one.
    - manual optimization with ``accumulate_grad_batches=N``: runs each non-final micro-batch (batch index
      ``i`` with ``(i + 1) % N != 0``, except the last batch of the epoch) inside ``block_backward_sync()``,
      so the user's ``training_step`` needs no change. Calling ``optimizer.step()`` in such a micro-batch is
      an error, since its gradients were not synchronized.
    - manual optimization with ``toggle_model(sync_grad=...)`` (GANs with several optimizers): works under
      every strategy through the same ``block_backward_sync()``; the callback only verifies support.
    - a strategy with ``handles_gradient_accumulation`` (DeepSpeed) decides itself when to synchronize; the
      callback logs that it has nothing to do and leaves it alone.

    Args:
        accumulate_grad_batches: micro-batches per optimizer step in *manual* optimization. Leave ``None`` in
            automatic optimization (the Trainer's ``accumulate_grad_batches`` is used) and in manual
            optimization that uses ``toggle_model(sync_grad=...)`` itself.

    Raises:
        ValueError: ``accumulate_grad_batches < 1``.
        MisconfigurationException: (at ``setup``) ``accumulate_grad_batches`` is passed in automatic
            optimization and differs from the Trainer's; (at ``on_fit_start``) the strategy has no way to skip
            synchronization.
        RuntimeError: an optimizer steps inside a micro-batch whose synchronization was skipped.

    Example::

        from lightning_mgpu.callbacks import GradSyncToggle

        # automatic optimization: one all-reduce every 4 micro-batches, under any strategy
        Trainer(strategy="horovod", accumulate_grad_batches=4, callbacks=[GradSyncToggle()])

        # manual optimization that steps when (batch_idx + 1) % 4 == 0
        Trainer(strategy="ddp", callbacks=[GradSyncToggle(accumulate_grad_batches=4)])
    """

    def __init__(self, accumulate_grad_batches: int | None = None) -> None:
        if accumulate_grad_batches is not None and (
            not isinstance(accumulate_grad_batches, int)
            or isinstance(accumulate_grad_batches, bool)
            or accumulate_grad_batches < 1
        ):
            raise ValueError(
                f"accumulate_grad_batches must be None or an integer >= 1, got {accumulate_grad_batches!r}."
            )
        self.accumulate_grad_batches = accumulate_grad_batches
        self.skipped_micro_batches = 0
        self._blocker: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
        self._installed_on: Strategy | None = None
        self._unsynced: contextlib.ExitStack | None = None
        self._unsynced_batch_idx: int | None = None
        self._strategy_accumulates = False

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        n = self.accumulate_grad_batches
        if pl_module.automatic_optimization and n is not None and n != trainer.accumulate_grad_batches:
            raise MisconfigurationException(
                f"GradSyncToggle(accumulate_grad_batches={n}) conflicts with"
                f" Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}). In automatic optimization"
                " the Trainer's value decides when to synchronize: use GradSyncToggle() and set"
                " Trainer(accumulate_grad_batches=...)."
            )

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        strategy = trainer.strategy
        # Before resolving a blocker: a strategy that accumulates itself (DeepSpeed) needs none, and may not
        # offer one, which is not an error.
        self._strategy_accumulates = strategy.handles_gradient_accumulation
        if self._strategy_accumulates:
            self._blocker = None
            rank_zero_info(f"GradSyncToggle: {type(strategy).__name__} accumulates gradients itself; nothing to do.")
            return
        self._blocker = self._resolve_blocker(strategy)
        if pl_module.automatic_optimization:
            if trainer.accumulate_grad_batches == 1:
                rank_zero_info(
                    "GradSyncToggle: accumulate_grad_batches=1, so every micro-batch ends with a step and is"
                    " synchronized."
                )
        elif self.accumulate_grad_batches is None:
            rank_zero_info(
                "GradSyncToggle: manual optimization without accumulate_grad_batches; synchronization is skipped"
                " only inside `toggle_model(sync_grad=False)`."
            )

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        n = self.accumulate_grad_batches
        if self._strategy_accumulates:
            return  # the strategy decides when to synchronize
        if pl_module.automatic_optimization:
            if trainer.accumulate_grad_batches > 1 and trainer.fit_loop._should_accumulate():
                self.skipped_micro_batches += 1  # Lightning's loop blocks this one through block_backward_sync()
            return
        if n is None or n == 1 or self._is_final_micro_batch(trainer, batch_idx, n):
            return
        self._close()
        stack = contextlib.ExitStack()
        if self._blocker is not None:
            stack.enter_context(self._blocker())
        self._unsynced, self._unsynced_batch_idx = stack, batch_idx
        self.skipped_micro_batches += 1

    @override
    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if self._unsynced is None:
            return
        batch_idx, n = self._unsynced_batch_idx, self.accumulate_grad_batches
        self._close()
        raise RuntimeError(
            f"GradSyncToggle(accumulate_grad_batches={n}) skipped gradient synchronization for batch_idx={batch_idx},"
            f" but the optimizer steps in that micro-batch, so the ranks would apply different gradients. Step"
            f" only when (batch_idx + 1) % {n} == 0 (and on the last batch of the epoch), or set"
            " accumulate_grad_batches to your stepping interval."
        )

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._close()

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._close()  # `on_train_batch_start` returning -1 ends the epoch without `on_train_batch_end`

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._close()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._close()
        if self._installed_on is not None:
            self._installed_on.__dict__.pop("block_backward_sync", None)
            self._installed_on = None

    def _close(self) -> None:
        if self._unsynced is not None:
            stack, self._unsynced, self._unsynced_batch_idx = self._unsynced, None, None
            stack.close()

    @staticmethod
    def _is_final_micro_batch(trainer: pl.Trainer, batch_idx: int, n: int) -> bool:
        if (batch_idx + 1) % n == 0:
            return True
        # Like Lightning's automatic loop, the last batch of an epoch always steps (and so must sync).
        num_batches = trainer.num_training_batches
        if isinstance(num_batches, int) and batch_idx + 1 >= num_batches:
            return True
        return bool(getattr(trainer.fit_loop.epoch_loop.batch_progress, "is_last_batch", False))

    def _resolve_blocker(self, strategy: Strategy) -> Callable[[], contextlib.AbstractContextManager[Any]] | None:
        """The context manager that skips synchronization under ``strategy`` (``None``: nothing to sync)."""
        if not isinstance(strategy, ParallelStrategy):
            return None  # one device: nothing is synchronized
        if type(strategy).block_backward_sync is not ParallelStrategy.block_backward_sync:
            return strategy.block_backward_sync  # the strategy implements the contract (all bundle strategies)
        model = strategy.model
        if isinstance(model, DataParallel):
            return None  # one process drives every device: there is no gradient synchronization to skip
        if isinstance(model, DistributedDataParallel):
            return strategy.block_backward_sync  # Lightning's default covers torch DDP
        no_sync = getattr(model, "no_sync", None)
        if callable(no_sync):
            # Install it on the instance so Lightning's loop and toggle_model() use it too.
            strategy.block_backward_sync = no_sync  # type: ignore[method-assign]
            self._installed_on = strategy
            rank_zero_info(
                f"GradSyncToggle: skipping sync with {type(model).__name__}.no_sync() under {type(strategy).__name__}."
            )
            return no_sync
        raise MisconfigurationException(
            f"GradSyncToggle cannot skip gradient synchronization under {type(strategy).__name__}: it does not"
            f" override `block_backward_sync()` and its model wrapper ({type(model).__name__}) has no `no_sync()`."
            " Implement `block_backward_sync()` in the strategy (a context manager inside which backward does"
            " not synchronize), or remove GradSyncToggle."
        )
