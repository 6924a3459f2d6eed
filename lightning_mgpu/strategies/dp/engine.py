"""``LightningDataParallel``: ``torch.nn.DataParallel`` that runs LightningModule steps exactly.

Differences from a plain ``nn.DataParallel`` around a LightningModule:

- every replica runs the step on its own copy (:class:`~lightning_mgpu.strategies.dp.replica.StepModule`);
- the batch is split in balanced sizes (5 samples on 4 GPUs: ``[2, 1, 1, 1]``, not torch's
  ``[2, 2, 1]``) after checking that every tensor has the same first dimension;
- the loss is combined with each replica's share of the batch, so loss and gradients equal
  single-device training on the same batch, also on uneven splits;
- ``self.log`` logs once per step, and manual optimization runs in lock-step;
- failures on a batch smaller than the device count say how to fix them;
- a LightningModule that defines ``combine_replica_outputs(step_name, outputs)`` gets the gathered outputs of
  all replicas (the whole batch of this process) and returns the step output: a loss over the whole batch,
  such as a contrastive loss, where a per-replica loss would see only a chunk (Lightning 1.x's ``*_step_end``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from torch import Tensor, nn

from lightning_mgpu.strategies.dp.reduce import (
    LossReduction,
    SplitPlan,
    plan_split,
    reduce_step_outputs,
    scatter_batch,
)
from lightning_mgpu.strategies.dp.replica import (
    ReplicaAbortedError,
    StepCall,
    StepModule,
)

STEP_NAMES = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
#: The LightningModule hook that combines the replicas' gathered step outputs (see :func:`combine_hook`).
COMBINE_HOOK = "combine_replica_outputs"


def combine_hook(module: LightningModule) -> Any:
    """The module's ``combine_replica_outputs(step_name, outputs)``, or ``None`` where it defines none.

    ``outputs`` is what the replicas returned, gathered on the root device: tensors concatenated along dim 0
    (0-d tensors, a per-replica loss among them, stacked), containers rebuilt, other values from the first
    replica. The hook's return value is the step output (for ``training_step``, the loss or a dict with
    ``"loss"``), so gradients flow from a loss over the whole batch back through every replica.

    Example::

        def training_step(self, batch, batch_idx):
            return {"z": self.encoder(batch)}  # each replica embeds its chunk

        def combine_replica_outputs(self, step_name, outputs):
            return {"loss": info_nce(outputs["z"])} if step_name == "training_step" else outputs
    """
    return getattr(module, COMBINE_HOOK, None)


def single_device_step(module: LightningModule, step_name: str) -> Any:
    """A runner for ``step_name`` on one device that still calls the module's :func:`combine_hook`, or ``None``
    where the module has none (Lightning's own path then runs the step)."""
    combine = combine_hook(module)
    if combine is None:
        return None

    def run(*args: Any, **kwargs: Any) -> Any:
        output = getattr(module, step_name)(*args, **kwargs)
        return None if output is None else combine(step_name, output)

    return run


class SmallBatchError(RuntimeError):
    """A step failed on a batch too small to give every device (at least two) samples."""


class LightningDataParallel(nn.DataParallel):
    """``nn.DataParallel`` over a :class:`StepModule`, called as ``model("training_step", batch, batch_idx)``.

    Called without a step name (``model(x)``) it runs the LightningModule's ``forward`` on every
    device and concatenates the outputs on the root device, like a plain ``nn.DataParallel``.

    Args:
        module: the LightningModule, already on ``cuda:device_ids[0]``.
        device_ids: CUDA device indices; the first one is the root (output) device.
        loss_reduction: how the replica losses combine: ``"weighted_mean"`` (exact for losses that
            average over samples), ``"sum"`` (exact for losses that sum over samples) or
            ``"mean"`` (Lightning 1.9's plain mean, biased on uneven splits).

    Raises:
        ValueError: ``device_ids`` is empty.
        RuntimeError: CUDA is not available.

    Example::

        model = LightningDataParallel(MyLightningModule().cuda(0), device_ids=[0, 1])
        loss = model("training_step", batch, 0)
    """

    def __init__(
        self, module: LightningModule, device_ids: Sequence[int], loss_reduction: LossReduction = "weighted_mean"
    ) -> None:
        if not device_ids:
            raise ValueError("LightningDataParallel needs at least one CUDA device index in device_ids, e.g. [0, 1].")
        super().__init__(StepModule(module), device_ids=list(device_ids), output_device=device_ids[0])
        if not self.device_ids:  # nn.DataParallel quietly does nothing without CUDA
            raise RuntimeError(
                "LightningDataParallel needs CUDA devices, and none is available. Use Trainer(strategy='dp'), which"
                " runs on a single device without GPUs, or strategy='ddp' for several CPU processes."
            )
        self.loss_reduction: LossReduction = loss_reduction
        self._warned_unsplittable = False

    @property
    def lightning_module(self) -> LightningModule:
        return self.module.module

    @property
    def replica_devices(self) -> list[torch.device]:
        return [torch.device(self.src_device_obj.type, i) for i in self.device_ids]

    @property
    def root_device(self) -> torch.device:
        return self.replica_devices[0]

    def split_tensor(self, tensor: Tensor, sizes: Sequence[int], devices: Sequence[torch.device]) -> Sequence[Tensor]:
        """Copy the chunks of ``tensor`` to ``devices`` (torch's ``Scatter``, with our sizes)."""
        from torch.nn.parallel._functions import Scatter

        return Scatter.apply([d.index for d in devices], list(sizes), 0, tensor)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if inputs and isinstance(inputs[0], str) and inputs[0] in STEP_NAMES:
            step_name, args = inputs[0], inputs[1:]
        else:
            step_name, args = "forward", inputs
        with torch.autograd.profiler.record_function(f"LightningDataParallel.{step_name}"):
            return self._run(step_name, args, kwargs)

    def _run(self, step_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        devices = self.replica_devices
        plan = plan_split(args, kwargs, len(devices))
        has_loss = step_name not in ("predict_step", "forward")
        combine = combine_hook(self.lightning_module) if step_name != "forward" else None
        if combine is not None:
            has_loss = False  # the hook makes the loss from everything the replicas returned
        if plan.num_replicas == 1:
            if plan.batch_size is None:
                self._warn_unsplittable(args)
            try:
                outputs = [getattr(self.lightning_module, step_name)(*args, **kwargs)]
            except Exception as err:
                self._raise_explained(err, None, plan, step_name)
        else:
            used = devices[: plan.num_replicas]
            chunks = scatter_batch(args, kwargs, plan, used, self.split_tensor)
            call = StepCall(step_name, self.lightning_module, used, plan.sizes, self.loss_reduction, self.root_device)
            replicas = self.replicate(self.module, [d.index for d in used])
            inputs = [(call, i, *chunk_args) for i, (chunk_args, _) in enumerate(chunks)]
            try:
                outputs = self.parallel_apply(replicas, inputs, [chunk_kwargs for _, chunk_kwargs in chunks])
            except Exception as err:
                self._raise_explained(err, call, plan, step_name)
            call.replay_logs()
        output = reduce_step_outputs(outputs, plan.sizes, self.root_device, mode=self.loss_reduction, has_loss=has_loss)
        return output if combine is None or output is None else combine(step_name, output)

    def _raise_explained(self, err: Exception, call: StepCall | None, plan: SplitPlan, step_name: str) -> NoReturn:
        cause: BaseException = err
        if isinstance(err, ReplicaAbortedError) and call is not None and call.rendezvous.root_error is not None:
            # The first replica (in device order) only stopped because another one failed.
            cause = call.rendezvous.root_error
        if plan.batch_size is not None and plan.underfilled:
            raise SmallBatchError(
                f"dp: {step_name} failed on a batch of {plan.batch_size} samples split over {plan.num_devices} devices"
                f" as {list(plan.sizes)}. A batch smaller than twice the number of devices (typically the last"
                " batch of an epoch) leaves single samples on a replica, which layers such as BatchNorm reject in"
                " training; if that is the cause, use DataLoader(..., drop_last=True) or a batch size of at least"
                f" {2 * plan.num_devices} (a multiple of {plan.num_devices}). Original error: {cause}"
            ) from cause
        raise cause

    def _warn_unsplittable(self, args: tuple[Any, ...]) -> None:
        if self._warned_unsplittable:
            return
        self._warned_unsplittable = True
        kind = type(args[0]).__name__ if args else "nothing"
        rank_zero_warn(
            f"dp: the batch ({kind}) holds no tensor to split across the devices, so the step runs on"
            f" {self.root_device} only. Return tensors, or tuples/lists/dicts/dataclasses of tensors, from the"
            " DataLoader to use every device, or use strategy='ddp'."
        )
