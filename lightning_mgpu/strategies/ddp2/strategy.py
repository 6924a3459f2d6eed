"""``ddp2``: DataParallel inside each node, DDP across nodes (Lightning 1.x's ``ddp2``, rebuilt).

One process per node drives all of that node's devices with the bundle's exact DataParallel engine
(:class:`~lightning_mgpu.strategies.dp.engine.LightningDataParallel`); the node processes all-reduce gradients
with torch's ``DistributedDataParallel``. A step therefore sees the node's whole batch at once (contrastive
losses, batch statistics through ``combine_replica_outputs``), while training still scales across nodes.
See ``docs/ddp2.md``.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override

from lightning_mgpu.checkpoint.io import AtomicCheckpointIO
from lightning_mgpu.strategies._steps import StepRouting
from lightning_mgpu.strategies.dp.engine import LightningDataParallel, combine_hook, single_device_step
from lightning_mgpu.strategies.dp.reduce import LOSS_REDUCTIONS, BatchSplitError, LossReduction, plan_split
from lightning_mgpu.strategies.dp.strategy import DataParallelDevices


class DDP2TopologyError(ValueError):
    """``ddp2`` was started with other than one process per node."""


class DDP2Strategy(DataParallelDevices, StepRouting, DDPStrategy):
    """One process per node, DataParallel over the node's devices, DDP across the nodes.

    Launch it like ``ddp`` with one process per node: Lightning's launcher (``num_nodes`` machines, each started
    with its ``NODE_RANK``), ``torchrun --nproc-per-node 1`` or SLURM with ``--ntasks-per-node=1``. The
    LightningModule is the one written for ``dp``:

    - within a node, the batch is split across the devices and the replica losses combine weighted by each
      replica's share of the node's batch (the ``dp`` engine, exact on uneven splits);
    - across nodes, each node's loss is scaled by its share of the global batch before DDP's averaging
      all-reduce, so gradients are those of the global batch, exact also when nodes get different numbers
      of samples (one small all-reduce of the batch sizes per step);
    - a module that defines ``combine_replica_outputs(step_name, outputs)`` gets the node's whole batch of
      replica outputs (see :func:`~lightning_mgpu.strategies.dp.engine.combine_hook`);
    - samplers shard by node; ``self.log(..., sync_dist=True)`` reduces across nodes once (the replicas are
      combined in the step); checkpoints have plain keys and load under ``ddp``, ``dp`` and ``sharded``.

    Load batches of per-device batch x devices samples per node. Without several CUDA devices per node it runs
    one device per node, like ``dp``.

    Args:
        loss_reduction: how replica losses combine within a node, as for ``dp``.
        **kwargs: passed to Lightning's :class:`~lightning.pytorch.strategies.DDPStrategy` (``timeout``,
            ``process_group_backend``, ``find_unused_parameters``, ...).

    Raises:
        ValueError: an unknown ``loss_reduction``, or ``start_method`` other than ``"popen"``.
        DDP2TopologyError: the launcher started more processes than nodes (at ``Trainer`` construction).
        ValueError: ``sync_batchnorm=True`` (at ``fit``): replicas of one process cannot join a process group.

    Example::

        trainer = Trainer(strategy="ddp2", accelerator="gpu", devices=4, num_nodes=2)
        # on each node: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-endpoint node0:29400 train.py
    """

    strategy_name = "ddp2"
    optional_dependency: str | None = None
    # Capabilities (lightning_mgpu/utilities/capabilities.py).
    loads_node_batch = True
    ray_incompatibility = (
        "one `ddp2` process per node drives the node's devices, while Ray Train runs one process per device; use 'ddp'"
    )

    def __init__(self, loss_reduction: LossReduction = "weighted_mean", **kwargs: Any) -> None:
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"loss_reduction={loss_reduction!r} is not supported; choose one of {LOSS_REDUCTIONS}.")
        if kwargs.get("start_method", "popen") != "popen":
            raise ValueError(
                "ddp2 starts one process per node from the launcher (start_method='popen'); spawning is not supported."
            )
        kwargs.setdefault("checkpoint_io", AtomicCheckpointIO())  # a kill mid-save never leaves a torn .ckpt
        super().__init__(**kwargs)
        self.loss_reduction: LossReduction = loss_reduction
        self._loss_scale = 1.0

    # ------------------------------------------------------------------ topology: one process per node
    @property
    @override
    def num_processes(self) -> int:
        # One process per node: Lightning's launcher starts no local children, and ranks count nodes.
        return 1 if self.parallel_devices else 0

    @property
    def node_devices(self) -> int:
        """The devices one node process drives."""
        return len(self.parallel_devices or [])

    @override
    def _configure_launcher(self) -> None:
        self._check_one_process_per_node()
        super()._configure_launcher()

    def _check_one_process_per_node(self) -> None:
        env = self.cluster_environment
        if env is None or not env.creates_processes_externally:
            return
        started, per_node = env.world_size(), int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        if per_node > 1 or started != self.num_nodes:
            raise DDP2TopologyError(
                f"strategy='ddp2' runs one process per node, which drives all of that node's devices, but the launcher"
                f" started {started} process(es) for num_nodes={self.num_nodes}"
                + (f" ({per_node} on this node)" if per_node > 1 else "")
                + ". Start one process per node: torchrun --nproc-per-node 1, SLURM --ntasks-per-node=1 (srun one"
                " task per node); pass the node's devices as devices=N and the node count as num_nodes. To run one"
                " process per device instead, use strategy='ddp'."
            )

    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        devices = self.node_devices
        asked = len(self._requested_devices or [])
        how = "DataParallel" if self.is_data_parallel else "a single device (DataParallel needs several CUDA GPUs)"
        rank_zero_info(
            f"strategy='ddp2': {self.num_nodes} node process(es), each driving {devices} device(s) with {how}"
            + (f" ({asked} requested)" if asked > devices else "")
            + "; gradients are all-reduced across nodes by DDP."
        )

    # ------------------------------------------------------------------ the model: DDP around DataParallel
    @override
    def _setup_model(self, model: nn.Module) -> DistributedDataParallel:
        if self._layer_sync is not None:
            raise ValueError(
                "sync_batchnorm=True is not supported under strategy='ddp2': the replicas of a node run in one"
                " process and cannot join a process group. Each device normalises its own chunk, as under 'dp';"
                " use strategy='ddp' (one process per device) for synchronised BatchNorm."
            )
        node = self._wrap_data_parallel(model, self.loss_reduction) if self.is_data_parallel else model
        # A module spread over several devices (or on the CPU) takes device_ids=None; DataParallel moves inputs.
        device_ids = None if node is not model else self.determine_ddp_device_ids()
        return DistributedDataParallel(module=node, device_ids=device_ids, **self._ddp_kwargs)

    @property
    def _node_engine(self) -> LightningDataParallel | None:
        if isinstance(self.model, DistributedDataParallel) and isinstance(self.model.module, LightningDataParallel):
            return self.model.module
        return None

    # ------------------------------------------------------------------ steps
    def _step_runner(self, step_name: str) -> Any:
        if step_name == "training_step" and isinstance(self.model, DistributedDataParallel):
            return self._training_step
        engine = self._node_engine
        if engine is not None:
            return functools.partial(engine, step_name)  # evaluation: the node's devices, no gradient sync
        return single_device_step(self.lightning_module, step_name) if self.lightning_module is not None else None

    def _training_step(self, *args: Any, **kwargs: Any) -> Any:
        self._loss_scale = self._node_share(args, kwargs)
        assert self.model is not None and self.lightning_module is not None
        if self._node_engine is not None:
            return self.model("training_step", *args, **kwargs)  # DDP's forward, then the node's replicas
        # One device per node: the step runs inside DDP's forward (Lightning's redirection), the hook after it.
        output = self._forward_redirection(self.model, self.lightning_module, "training_step", *args, **kwargs)
        combine = combine_hook(self.lightning_module)
        return output if combine is None or output is None else combine("training_step", output)

    def _node_share(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
        """This node's share of the global batch x nodes: the factor that makes DDP's mean a sample-weighted one."""
        try:
            samples = plan_split(args, kwargs, 1).batch_size or 0
        except BatchSplitError:
            samples = 0  # nothing to weight by; DataParallel explains the batch on its own
        sizes = torch.tensor([float(samples), 1.0 if samples else 0.0], dtype=torch.float64, device=self.root_device)
        total, weighted_nodes = (float(v) for v in self.reduce(sizes, reduce_op="sum"))
        if not samples or weighted_nodes < self.world_size or total <= 0:
            return 1.0  # some node had no countable batch: plain averaging, as ddp does
        return samples * self.world_size / total  # exactly 1.0 when every node has the same batch size

    @override
    def backward(self, closure_loss: Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> Tensor:
        if self._loss_scale != 1.0:
            closure_loss = closure_loss * self._loss_scale
        return super().backward(closure_loss, optimizer, *args, **kwargs)

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(
            cls.strategy_name, cls, description="DataParallel within each node, DistributedDataParallel across nodes"
        )
