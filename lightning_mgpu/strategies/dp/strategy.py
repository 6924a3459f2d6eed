"""``dp``: ``torch.nn.DataParallel`` on Lightning 2.x, with exact loss reduction.

``Trainer(strategy="dp", accelerator="gpu", devices=4)`` trains in one process on four GPUs of
one machine: each batch is split along dim 0, every GPU runs the step on its own replica of the
LightningModule, and the losses are combined on the first GPU weighted by each replica's share
of the batch, so loss and gradients equal those of one device on the same batch.

On the CPU or a single GPU the strategy runs as a single-device strategy (with a one-line note),
so code written for ``dp`` runs everywhere. See ``docs/dp.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.pytorch import LightningModule
from lightning.pytorch.accelerators import Accelerator
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import ParallelStrategy
from lightning.pytorch.strategies.strategy import Strategy, TBroadcast
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch import Tensor, nn
from typing_extensions import override

from lightning_mgpu.checkpoint.io import AtomicCheckpointIO, strip_prefix
from lightning_mgpu.data.loader import loader_batch_size
from lightning_mgpu.strategies._steps import StepRouting
from lightning_mgpu.strategies.dp.engine import (
    LightningDataParallel,
    SmallBatchError,
    single_device_step,
)
from lightning_mgpu.strategies.dp.reduce import (
    LOSS_REDUCTIONS,
    BatchSplitError,
    LossReduction,
)
from lightning_mgpu.utilities.devices import physical_device_ids

__all__ = [
    "BatchSplitError",
    "DataParallelStrategy",
    "LightningDataParallel",
    "SmallBatchError",
    "DataParallelDevices",
]


class DataParallelDevices:
    """The devices of a strategy whose one process drives several with DataParallel (``dp``, ``ddp2``).

    DataParallel needs several devices of ``_data_parallel_device_types`` (CUDA); elsewhere one device does the same
    work, so ``parallel_devices`` keeps the first alone and ``trainer.num_devices`` (and the loader batch sized from it)
    says 1.
    """

    #: Device types whose devices DataParallel drives (the CPU emulators of lightning_mgpu.testing add "cpu").
    _data_parallel_device_types: tuple[str, ...] = ("cuda",)
    #: The devices the Trainer asked for, before the fallback to one.
    _requested_devices: list[torch.device] | None = None
    _parallel_devices: list[torch.device] | None

    @property
    def parallel_devices(self) -> list[torch.device] | None:
        return self._parallel_devices

    @parallel_devices.setter
    def parallel_devices(self, devices: list[torch.device] | None) -> None:
        self._requested_devices = list(devices) if devices else devices
        self._parallel_devices = devices[:1] if devices and not self._splits_across(devices) else devices

    @property
    def is_data_parallel(self) -> bool:
        """Whether steps are split across several devices (``False``: one device does the work)."""
        return self._splits_across(self.parallel_devices)

    def _splits_across(self, devices: list[torch.device] | None) -> bool:
        types = self._data_parallel_device_types
        return devices is not None and len(devices) > 1 and all(torch.device(d).type in types for d in devices)

    def _wrap_data_parallel(self, model: nn.Module, loss_reduction: LossReduction) -> LightningDataParallel:
        """``model`` in the dp engine over these devices (the first is the root)."""
        assert isinstance(model, LightningModule), f"DataParallel wraps a LightningModule, got {type(model).__name__}"
        device_ids = [torch.device(d).index or 0 for d in self.parallel_devices or []]
        return LightningDataParallel(model, device_ids=device_ids, loss_reduction=loss_reduction)


class DataParallelStrategy(DataParallelDevices, StepRouting, ParallelStrategy):
    """One process, several GPUs of one machine: the LightningModule wrapped in ``torch.nn.DataParallel``.

    Training, validation, test and predict steps are split across the devices: the batch is cut
    along dim 0 (balanced; a batch smaller than the device count runs on fewer devices), each
    device runs the step on its own replica, and the outputs come back to the first device:

    - the loss (a scalar step output, or the ``"loss"`` entry of a dict) is the sum of the
      replica losses weighted by each replica's share of the batch, so loss and gradients equal
      single-device training on the same batch, also on uneven splits (Lightning 1.9 took a
      plain mean);
    - other tensors are concatenated along dim 0 (0-d tensors stacked, one entry per replica);
      non-tensor values come from the first replica;
    - ``self.log`` inside a step logs one value per step, reduced over the replicas
      (``reduce_fx="mean"`` weighted by the replicas' batch sizes, ``"sum"``, ``"max"``, ``"min"``);
    - under manual optimization ``manual_backward``, ``optimizer.step()``/``zero_grad()``,
      ``clip_gradients``, ``toggle_optimizer`` and ``lr_scheduler.step()`` run once for the whole
      batch, with every replica waiting at each call (lock-step).

    ``trainer.world_size`` is 1 (one process); ``trainer.num_devices`` is the number of GPUs.
    Load batches of per-device batch x devices samples. On the CPU or with one GPU the strategy
    runs as a single-device strategy.

    Limitations of DataParallel itself (use ``strategy="ddp"`` to avoid them):

    - state changed on a replica during a step is lost: attributes set on ``self``, torchmetrics
      states and BatchNorm running statistics of all but the first device. Running statistics
      therefore come from the first device's chunk;
    - BatchNorm normalises each device's chunk separately; ``sync_batchnorm=True`` has no effect
      (there is no process group to synchronise over);
    - the replicas are rebuilt on every step and one Python process drives every GPU, so it
      scales worse than ``ddp``; parameters a step does not use get zero gradients rather
      than ``None`` (so momentum and weight decay still move them);
    - ``self.print`` and direct logger calls inside a step run once per replica; ``self.all_gather``
      returns the replica's own chunk.

    Args:
        accelerator, parallel_devices, checkpoint_io, precision_plugin: set by the Trainer (from ``devices=``,
            ``precision=`` and ``plugins=``).
        loss_reduction: ``"weighted_mean"`` (default; exact for losses that average over samples),
            ``"sum"`` (exact for losses that sum over samples) or ``"mean"`` (Lightning 1.9).

    Raises:
        ValueError: unknown ``loss_reduction``, or ``num_nodes > 1``.

    Example::

        trainer = Trainer(strategy="dp", accelerator="gpu", devices=4, precision="bf16-mixed")
        trainer.fit(model, DataLoader(dataset, batch_size=64 * 4, drop_last=True))
    """

    strategy_name = "dp"
    optional_dependency: str | None = None
    # Capabilities (lightning_mgpu/utilities/capabilities.py).
    loads_node_batch = True
    syncs_across_processes = False
    ray_incompatibility = (
        "one `dp` process drives several devices, while Ray Train runs one process per device; use 'ddp'"
    )

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        loss_reduction: LossReduction = "weighted_mean",
    ) -> None:
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction={loss_reduction!r} is not supported; choose one of {LOSS_REDUCTIONS}.")
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=None,
            # Atomic saves and safe loads by default (a kill mid-save never leaves a torn .ckpt).
            checkpoint_io=checkpoint_io if checkpoint_io is not None else AtomicCheckpointIO(),
            precision_plugin=precision_plugin,
        )
        self.loss_reduction: LossReduction = loss_reduction
        self._noted = False

    # ------------------------------------------------------------------ topology: one process (devices: the mixin)
    @property
    @override
    def root_device(self) -> torch.device:
        devices = self.parallel_devices
        return torch.device(devices[0]) if devices else torch.device("cpu")

    @property
    @override
    def global_rank(self) -> int:
        return 0

    @property
    @override
    def local_rank(self) -> int:
        return 0

    @property
    @override
    def node_rank(self) -> int:
        return 0

    @property
    @override
    def world_size(self) -> int:
        return 1

    @property
    def num_nodes(self) -> int:
        return 1

    @num_nodes.setter
    def num_nodes(self, num_nodes: int) -> None:
        if num_nodes != 1:
            raise ValueError(
                f"strategy='dp' runs one process on one machine, but num_nodes={num_nodes} was requested."
                " Use strategy='ddp' (or 'horovod') to train on several machines."
            )

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        # One process loads the whole batch and splits it itself.
        return {"num_replicas": 1, "rank": 0}

    # ------------------------------------------------------------------ set-up
    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        if not self._noted:
            self._noted = True
            rank_zero_info(self._topology_note())

    def _topology_note(self) -> str:
        if not self.is_data_parallel:
            asked = len(self._requested_devices or [])
            extra = f" ({asked} {self.root_device.type} devices requested)" if asked > 1 else ""
            return (
                f"strategy='dp' on {self.root_device}{extra}: running as a single-device strategy; DataParallel"
                " needs two or more CUDA GPUs."
            )
        assert self.parallel_devices is not None
        indices = [torch.device(d).index or 0 for d in self.parallel_devices]
        try:
            physical = physical_device_ids(indices)
        except ValueError:  # an odd CUDA_VISIBLE_DEVICES; torch already accepted the indices
            physical = [str(i) for i in indices]
        where = ", ".join(f"cuda:{i}" for i in indices)
        mapped = f" (physical GPUs {', '.join(physical)} via CUDA_VISIBLE_DEVICES)"
        if physical == [str(i) for i in indices]:
            mapped = ""
        return (
            f"strategy='dp': one process drives {where}{mapped} with torch.nn.DataParallel; batches are split on and"
            f" outputs gathered to cuda:{indices[0]}."
        )

    @override
    def process_dataloader(self, dataloader: object) -> object:
        """Refuse a training batch smaller than the device count before the first step.

        DataParallel would run with idle devices on every step (a replica needs at least one sample), and
        BatchNorm statistics over one sample per device are meaningless. An uneven *last* batch is fine.

        Raises:
            MisconfigurationException: the training loader's batch size is smaller than the number of devices.
        """
        dataloader = super().process_dataloader(dataloader)
        trainer = self.lightning_module.trainer if self.lightning_module is not None else None
        devices = len(self.parallel_devices or [])
        size = loader_batch_size(dataloader)
        if self.is_data_parallel and trainer is not None and trainer.training and size is not None and size < devices:
            raise MisconfigurationException(
                f"strategy='dp' splits each batch across {devices} devices, but the training batch size is {size}:"
                f" {devices - size} device(s) would idle on every step. Use a batch size of at least {devices} (the"
                " whole batch is split across the devices, so it is the global batch), or fewer devices."
            )
        return dataloader

    @override
    def model_to_device(self) -> None:
        assert self.model is not None, "self.model must be set before self.model.to()"
        self.model.to(self.root_device)

    @override
    def _setup_model(self, model: nn.Module) -> nn.Module:
        self._note_layer_sync()
        return self._wrap_data_parallel(model, self.loss_reduction) if self.is_data_parallel else model

    def _note_layer_sync(self) -> None:
        if self._layer_sync is None:
            return
        if self.is_data_parallel:
            rank_zero_warn(
                "sync_batchnorm=True has no effect under strategy='dp': DataParallel replicas run in one process"
                " with no process group to synchronise over, so each device normalises its own chunk of the"
                " batch and the running statistics come from the first device's chunk. Use strategy='ddp' for"
                " synchronised BatchNorm."
            )
        else:
            rank_zero_info(
                "sync_batchnorm=True under strategy='dp' on one device: BatchNorm already sees the whole batch."
            )

    @override
    def teardown(self) -> None:
        # Unwrap so that a later fit/validate on the same Trainer starts from the plain module.
        if self.lightning_module is not None:
            self.model = self.lightning_module
        # Skip ParallelStrategy.teardown: it tears down a cluster environment (and deletes WORLD_SIZE
        # from os.environ) that a single process never set up.
        Strategy.teardown(self)

    # ------------------------------------------------------------------ steps
    def _step_runner(self, step_name: str) -> Any:
        if not isinstance(self.model, LightningDataParallel):
            # One device: Lightning's own path, unless the module combines step outputs itself.
            return single_device_step(self.lightning_module, step_name) if self.lightning_module is not None else None
        return functools.partial(self.model, step_name)

    @contextmanager
    @override
    def block_backward_sync(self) -> Generator[None, None, None]:
        """A no-op: gradients reduce onto the root module's parameters inside ``backward`` itself (the replicas are
        copies made by an autograd ``Broadcast``), so unlike DDP there is no later all-reduce to skip."""
        yield None

    # ------------------------------------------------------------------ collectives: the identity, in one process
    @override
    def reduce(self, tensor: Tensor | Any, group: Any | None = None, reduce_op: Any | None = "mean") -> Tensor | Any:
        return tensor  # one process holds every value (the replicas' outputs are reduced in the step)

    @override
    def all_gather(self, tensor: Tensor, group: Any | None = None, sync_grads: bool = False) -> Tensor:
        return tensor

    @override
    def barrier(self, name: str | None = None) -> None:
        pass

    @override
    def broadcast(self, obj: TBroadcast, src: int = 0) -> TBroadcast:
        return obj

    # ------------------------------------------------------------------ checkpoints
    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        """Load into the LightningModule, accepting keys saved from a wrapper (``module.`` prefixes)."""
        assert self.lightning_module is not None
        state_dict = checkpoint["state_dict"]
        own = self.lightning_module.state_dict()
        if state_dict and not (set(state_dict) & set(own)):
            state_dict = strip_prefix(state_dict)
        self.lightning_module.load_state_dict(state_dict, strict=strict)

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(
            cls.strategy_name, cls, description="torch.nn.DataParallel: one process, several GPUs"
        )
