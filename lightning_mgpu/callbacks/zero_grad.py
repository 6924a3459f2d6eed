"""Guarantee that gradients are ``None`` between optimizer steps, whoever zeroes them."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_debug
from typing_extensions import override

from lightning_mgpu.utilities.logging_steps import is_logging_step


class ZeroGradSetToNone(Callback):
    """Free every gradient right after each optimizer step, in automatic and manual optimization.

    What Lightning 2.6 does not do: torch >= 2.0 defaults to ``zero_grad(set_to_none=True)``, but a user
    override of ``optimizer_zero_grad`` that calls ``zero_grad(set_to_none=False)``, an optimizer wrapper
    (FairScale's ``OSS``, Horovod's ``DistributedOptimizer``), or a manual-optimization loop can still
    zero-fill, keeping one full gradient buffer per parameter alive between steps (through validation and
    checkpointing too). This callback sets ``param.grad = None`` for every parameter of the optimizer as soon
    as its ``step()`` returns (a ``register_step_post_hook``), and also at the end of a batch for a step the
    AMP ``GradScaler`` skipped. A later zero-filling ``zero_grad`` then finds nothing to fill, so the next
    backward allocates gradients afresh. Gradients are never touched between the micro-batches of an
    accumulation window.

    It logs ``grad_memory_released_mb``: the gradient memory (MiB, this rank) released at the optimizer steps
    of a batch, on the batches whose values reach the loggers (every ``log_every_n_steps``, and the last one):
    each ``self.log`` costs about a millisecond of Python in Lightning 2.6.

    Gradients that are views into a communication buffer (``DDP(gradient_as_bucket_view=True)``,
    ShardedDataParallel's reduce buckets with ``reduce_buffer_size > 0``) are zero-filled in place instead:
    their memory belongs to the buffer, so ``None`` would free nothing, and ShardedDataParallel would then
    reduce the stale bucket while the next backward wrote fresh gradients elsewhere, and ranks would diverge.

    Args:
        log_memory: log ``grad_memory_released_mb`` (on Lightning's logging steps).

    Example::

        from lightning_mgpu.callbacks import ZeroGradSetToNone

        Trainer(strategy="sharded", devices=2, callbacks=[ZeroGradSetToNone()])

    Note:
        Code that reads ``param.grad`` after the optimizer step (``on_train_batch_end``, a custom
        ``optimizer_step``) sees ``None``. Read gradients in ``on_before_optimizer_step`` instead.
    """

    def __init__(self, log_memory: bool = True) -> None:
        self.log_memory = log_memory
        self.released_bytes_total = 0
        self._batch_released_bytes = 0
        self._stepped_in_batch: dict[int, torch.optim.Optimizer] = {}
        self._log_this_batch = False
        self._handles: list[Any] = []

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After strategy setup, so the hooks sit on the optimizers the strategy actually steps (OSS, Horovod's).
        self._remove_hooks()
        for optimizer in trainer.optimizers:
            self._handles.append(optimizer.register_step_post_hook(self._after_step))

    @override
    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        # Called for every step attempt, including the ones the GradScaler will skip for inf/NaN gradients.
        if not self._stepped_in_batch:
            self._log_this_batch = self.log_memory and is_logging_step(trainer)  # before the step: Lightning's count
        self._stepped_in_batch[id(optimizer)] = optimizer

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        for optimizer in self._stepped_in_batch.values():
            self._release(optimizer)  # skipped steps, and wrappers whose step() bypasses the post hooks
        if self._log_this_batch and self._stepped_in_batch:
            pl_module.log("grad_memory_released_mb", self._batch_released_bytes / 2**20, on_step=True, on_epoch=False)
        self._stepped_in_batch.clear()
        self._batch_released_bytes = 0

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._remove_hooks()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._remove_hooks()

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"released_bytes_total": self.released_bytes_total}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.released_bytes_total = int(state_dict.get("released_bytes_total", 0))

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._release(optimizer)

    def _release(self, optimizer: torch.optim.Optimizer) -> None:
        released = 0
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if _in_shared_buffer(grad):
                    # A view into a reduce bucket: freeing it releases nothing and detaches it from the bucket.
                    grad.detach_() if grad.grad_fn is not None else grad.requires_grad_(False)
                    grad.zero_()
                    continue
                released += grad.numel() * grad.element_size()
                param.grad = None
        if released:
            rank_zero_debug(f"ZeroGradSetToNone: released {released / 2**20:.2f} MiB of gradients")
        self._batch_released_bytes += released
        self.released_bytes_total += released

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _in_shared_buffer(grad: torch.Tensor) -> bool:
    """Whether ``grad`` lives inside a larger buffer (a DDP or ShardedDataParallel reduce bucket).

    Not ``grad._is_view()``: FairScale attaches bucket slices through ``param.grad.data = ...``, which hides
    the view relation; the storage still tells.
    """
    return grad.untyped_storage().nbytes() > grad.numel() * grad.element_size()
