"""``horovod``: Horovod data parallelism for Lightning 2.x, under ``horovodrun`` or self-launched.

Every worker holds a full replica and trains on its shard of the data; ``hvd.DistributedOptimizer``
averages gradients with ring all-reduce. Launch it either way:

    $ horovodrun -np 2 --gloo python examples/train.py --strategy horovod      # one machine, CPU
    $ horovodrun -np 16 -H node0:8,node1:8 python train.py --devices 8 ...     # two machines
    $ python examples/train.py --strategy horovod --devices 2                  # self-launch (Gloo, localhost)

The self-launch runs the script again as each further worker, as ``ddp`` does. A notebook or ``python -c`` has no
script to run again: there ``devices > 1`` is refused, naming horovodrun, ``dp`` and Lightning's ``ddp_notebook``.
Gradients are reduced once per optimizer step, before ``on_after_backward``, so hooks and clipping see averaged
gradients; ``docs/horovod.md`` ("Gradient sync, clipping and accumulation") says how accumulation defers it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.optimizer import _optimizers_to_device
from lightning.fabric.utilities.seed import reset_seed
from lightning.fabric.utilities.types import ReduceOp
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies.parallel import ParallelStrategy
from lightning.pytorch.strategies.strategy import TBroadcast
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import (
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from lightning_utilities.core.rank_zero import rank_zero_only as utils_rank_zero_only
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.checkpoint.io import AtomicCheckpointIO
from lightning_mgpu.data.loader import loader_batch_size
from lightning_mgpu.strategies.horovod import runtime
from lightning_mgpu.strategies.horovod.environment import HorovodEnvironment
from lightning_mgpu.strategies.horovod.script_launcher import HorovodScriptLauncher, can_run_script_again
from lightning_mgpu.utilities.failures import failed_rank_report
from lightning_mgpu.utilities.optimizers import rebind_schedulers

__all__ = ["HorovodStrategy"]

log = logging.getLogger(__name__)


class HorovodStrategy(ParallelStrategy):
    """Horovod ring all-reduce data parallelism, registered as ``strategy="horovod"``.

    Args:
        accelerator, checkpoint_io, precision_plugin: set by the Trainer (from ``plugins=`` and ``precision=``).
        parallel_devices: set by the Trainer from ``devices``. Under ``horovodrun``, ``devices``
            must be ``hvd.local_size()`` (the workers on this host) or ``1`` (Lightning 1.x's
            "one device per worker"); outside it, ``devices=N > 1`` self-launches N workers.
        scale_lr: multiply every learning rate (and LR schedulers' base rates) by ``hvd.size()``,
            the linear scaling rule for the larger effective batch. Off by default. It stays
            correct across resumes at a different number of workers.
        compression: ``"none"`` or ``"fp16"`` (halves gradient traffic), or a
            ``horovod.torch.Compression`` member.
        gradient_predivide_factor: averaging is split into ``1/factor`` before the sum and
            ``factor/size`` after it (horovod's option, useful against fp16 overflow).
        start_timeout: seconds the self-launch may take to start the workers (default: Horovod's, 30 s).

    Raises:
        MissingDependencyError: horovod or its PyTorch extension is not installed; the message
            gives the install command (``python -m lightning_mgpu build-horovod``).
        ValueError: (at ``Trainer(...)``) ``devices > 1`` outside horovodrun where there is no script to run again
            (a notebook, ``python -c``), or ``num_nodes > 1`` outside horovodrun.

    Example::

        trainer = Trainer(strategy="horovod", accelerator="cpu", devices=2)    # self-launch
        trainer = Trainer(strategy=HorovodStrategy(scale_lr=True))             # under horovodrun
    """

    strategy_name = "horovod"
    # Capabilities (lightning_mgpu/utilities/capabilities.py).
    runs_under_horovodrun = True
    ray_incompatibility = (
        "Ray runs Horovod through its own HorovodTrainer, which the bundle does not wire; launch `--strategy horovod`"
        " with horovodrun instead, or use 'ddp' on Ray"
    )
    install_hint = "python -m lightning_mgpu build-horovod"
    # the optional package the registered names need (shown by `python -m lightning_mgpu info`)
    optional_dependency: str | None = "horovod"

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        scale_lr: bool = False,
        compression: Any = "none",
        gradient_predivide_factor: float = 1.0,
        start_timeout: int | None = None,
    ) -> None:
        # Fail at Trainer(strategy="horovod"), with the install command, not deep inside fit.
        hvd = runtime.horovod_torch()
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=HorovodEnvironment(),
            # Atomic saves and safe loads by default (a kill mid-save never leaves a torn .ckpt).
            checkpoint_io=checkpoint_io if checkpoint_io is not None else AtomicCheckpointIO(),
            precision_plugin=precision_plugin,
        )
        if isinstance(compression, str):
            compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}.get(compression, compression)
        if not hasattr(compression, "compress"):
            raise ValueError(
                f"compression must be 'none', 'fp16' or a horovod.torch.Compression member, got {compression!r}"
            )
        self._scale_lr = scale_lr
        self._compression = compression
        self._gradient_predivide_factor = gradient_predivide_factor
        self._start_timeout = start_timeout
        self._num_nodes = 1
        self._sync_blocked = 0
        self._failed = False
        self._collective_seq = 0
        # ids of optimizers synchronized since their last step; optimizer steps taken by this worker.
        self._synchronized: set[int] = set()
        self._optimizer_steps = 0

    # ------------------------------------------------------------------ topology

    @property
    def _initialized(self) -> bool:
        return runtime.is_initialized()

    # global_rank, local_rank and node_rank come from ParallelStrategy, which asks HorovodEnvironment.

    @property
    @override
    def world_size(self) -> int:
        if self._initialized:
            return runtime.horovod_torch().size()
        # The main process of a self-launch: report the job it is about to start.
        return max(1, self.num_processes * self._num_nodes)

    @property
    def num_nodes(self) -> int:
        return runtime.horovod_torch().cross_size() if self._initialized else self._num_nodes

    @num_nodes.setter
    def num_nodes(self, num_nodes: int) -> None:
        self._num_nodes = num_nodes

    @property
    def num_processes(self) -> int:
        return len(self.parallel_devices) if self.parallel_devices is not None else 0

    @property
    def is_distributed(self) -> bool:
        # Lightning injects DistributedSamplers and honours sync_dist only for "distributed" strategies.
        return True

    @property
    @override
    def root_device(self) -> torch.device:
        assert self.parallel_devices is not None
        return self.parallel_devices[self.local_rank]

    @property
    @override
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @property
    @override
    def handles_gradient_accumulation(self) -> bool:
        # Lightning keeps calling optimizer_step only on the last micro-batch and wraps the others
        # in block_backward_sync(); horovod's own backward_passes_per_step does the rest.
        return False

    # ------------------------------------------------------------------ launch and init

    @override
    def _configure_launcher(self) -> None:
        if runtime.launched_by_horovod():
            self._init_horovod()
            self._adopt_launcher_topology()
            return
        if self._num_nodes > 1:
            raise ValueError(
                f"Trainer(num_nodes={self._num_nodes}, strategy='horovod') needs horovodrun to start the workers"
                " on every machine, e.g. `horovodrun -np 16 -H node0:8,node1:8 python train.py`; the self-launch"
                " (plain `python train.py`) only starts workers on this machine. Drop num_nodes or use horovodrun."
            )
        if self.num_processes > 1:
            if not can_run_script_again():
                # The one self-launch runs the script again per worker; pickling the Trainer into workers instead
                # (horovod.run) was a second launcher with its own failure modes, for notebooks only.
                raise ValueError(
                    f"Trainer(strategy='horovod', devices={self.num_processes}) starts its workers by running the"
                    " script again, and a notebook or `python -c` has no script. Save the code as train.py and run"
                    f" `python train.py` or `horovodrun -np {self.num_processes} --gloo python train.py`; in the"
                    " notebook, use strategy='dp' or Lightning's strategy='ddp_notebook'."
                )
            self._launcher = HorovodScriptLauncher(self, start_timeout=self._start_timeout)

    def _init_horovod(self) -> None:
        hvd = runtime.horovod_torch()
        if not hvd.is_initialized():
            runtime.check_controller(hvd, runtime.required_controller())
            hvd.init()
        # Loggers, checkpoint writing and rank_zero_* helpers all consult these.
        rank_zero_only.rank = utils_rank_zero_only.rank = hvd.rank()  # type: ignore[attr-defined]

    def _adopt_launcher_topology(self) -> None:
        """Check ``devices``/``num_nodes`` against the workers horovodrun started; map one device per worker."""
        hvd = runtime.horovod_torch()
        local, nodes = hvd.local_size(), hvd.cross_size()
        devices = list(self.parallel_devices or [])
        if len(devices) not in (1, local):
            raise ValueError(
                f"Trainer(devices={len(devices)}) does not match the {local} Horovod workers started on this host"
                f" (hvd.local_size()={local}). Under horovodrun the launcher decides the workers: pass"
                f" devices={local} (or devices=1, one device per worker), or start horovodrun so that each host"
                f" runs {len(devices)} workers (-np / -H host:{len(devices)})."
            )
        if self._num_nodes not in (1, nodes):
            raise ValueError(
                f"Trainer(num_nodes={self._num_nodes}) does not match the {nodes} host(s) horovodrun started"
                f" (hvd.cross_size()={nodes}). Pass num_nodes={nodes}, or leave it at 1; horovodrun decides."
            )
        if len(devices) == 1 and local > 1:
            device = devices[0]
            self.parallel_devices = (
                [torch.device(device.type, i) for i in range(local)] if device.type == "cuda" else [device] * local
            )

    @override
    def setup_environment(self) -> None:
        self._init_horovod()
        hvd = runtime.horovod_torch()
        if self.root_device.type == "cuda" and not (hvd.cuda_built() or hvd.rocm_built()):
            raise RuntimeError(
                f"The model is on {self.root_device}, but the installed horovod was built without GPU support"
                " (hvd.cuda_built() is False). Rebuild it with HOROVOD_GPU_OPERATIONS=NCCL on a machine with"
                " CUDA and NCCL, or train on CPU (accelerator='cpu')."
            )
        super().setup_environment()
        # Same seed on every worker, as under DDP; rank 0's weights are broadcast anyway.
        reset_seed()

    # ------------------------------------------------------------------ model and optimizers

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        assert self.accelerator is not None
        self.accelerator.setup(trainer)
        assert self.model is not None
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and self._layer_sync is not None:
            self.model = self._convert_sync_batchnorm(self.model)
        self.model = self.precision_plugin.convert_module(self.model)
        _refuse_bfloat16(self.model, trainer.precision)
        self.model_to_device()
        # Every worker starts from rank 0's weights and buffers (also for validate/test/predict).
        self._broadcast_module_state(root=0)
        if fitting:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if fitting:
            _optimizers_to_device(self.optimizers, self.root_device)

    @override
    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    @override
    def setup_optimizers(self, trainer: pl.Trainer) -> None:
        super().setup_optimizers(trainer)
        self._synchronized.clear()
        self._optimizer_steps = 0
        for optimizer in self.optimizers:
            self._broadcast_optimizer_state(optimizer, root=0)
        if self._scale_lr:
            self._apply_lr_scale(announce=True)
        wrapped = [
            self._wrap_optimizer(opt, i, trainer.accumulate_grad_batches) for i, opt in enumerate(self.optimizers)
        ]
        # The wrapper shares the original's param_groups, so schedules apply either way; re-binding keeps
        # scheduler.optimizer truthful and torch's "step() before lr_scheduler.step()" check quiet.
        rebind_schedulers(self.lr_scheduler_configs, dict(zip(map(id, self.optimizers), wrapped)))
        self.optimizers = wrapped

    def _wrap_optimizer(self, optimizer: Optimizer, index: int, accumulate_grad_batches: int) -> Optimizer:
        hvd = runtime.horovod_torch()
        if runtime.is_distributed_optimizer(optimizer):
            # The user wrapped it already. Horovod's per-call class: callable through LightningOptimizer, picklable.
            return runtime.make_picklable(runtime.make_lightning_safe(optimizer))
        assert self.lightning_module is not None
        wrapped = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=runtime.named_parameters_for(self.lightning_module, optimizer, prefix=f"opt{index}"),
            compression=self._compression,
            backward_passes_per_step=accumulate_grad_batches,
            gradient_predivide_factor=self._gradient_predivide_factor,
        )
        runtime.make_lightning_safe(wrapped)
        # A model that reaches its optimizer (a hook's argument it kept) pickles as under ddp: torch.save(model).
        runtime.make_picklable(wrapped)
        if optimizer.state:
            wrapped.load_state_dict(optimizer.state_dict())
        return wrapped

    # ------------------------------------------------------------------ gradient sync

    def _distributed_optimizers(self) -> list[Any]:
        return [opt for opt in self.optimizers if runtime.is_distributed_optimizer(opt)]

    @contextmanager
    @override
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Accumulate gradients locally: backward passes inside launch no allreduce.

        The next backward pass outside the context (or the optimizer step) averages everything
        accumulated, in one allreduce round. Nested use is fine; only the outermost level acts.
        """
        optimizers = [] if self._sync_blocked else self._distributed_optimizers()  # the outer level blocked them
        self._sync_blocked += 1
        try:
            with runtime.blocked_gradient_hooks(optimizers):
                yield None
        finally:
            self._sync_blocked -= 1

    @override
    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        self.pre_backward(closure_loss)
        assert self.lightning_module is not None
        closure_loss = self.precision_plugin.pre_backward(closure_loss, self.lightning_module)
        self.precision_plugin.backward(closure_loss, self.lightning_module, optimizer, *args, **kwargs)
        if not self._sync_blocked:
            # Before on_after_backward: hooks, clipping and the step see averaged gradients, as under DDP.
            # Only optimizers whose allreduces this pass launched: another optimizer that is still
            # accumulating (blocked micro-batches of a GAN's other network) is reduced by its own pass.
            for opt in self._distributed_optimizers():
                if runtime.has_launched_allreduce(opt):
                    self._synchronize(opt)
        closure_loss = self.precision_plugin.post_backward(closure_loss, self.lightning_module)
        self.post_backward(closure_loss)
        return closure_loss

    @override
    def optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        model: pl.LightningModule | Module | None = None,
        **kwargs: Any,
    ) -> Any:
        if isinstance(optimizer, LightningOptimizer):
            optimizer = optimizer._optimizer
        if not runtime.is_distributed_optimizer(optimizer):
            return super().optimizer_step(optimizer, closure, model, **kwargs)

        def closure_then_synchronize() -> Any:
            # The precision plugin clips right after this closure returns, so reduce first. Also when no
            # backward ran here: every worker must join the allreduce another worker may have started.
            result = closure()
            if runtime.has_pending_gradients(optimizer) or id(optimizer) not in self._synchronized:
                self._synchronize(optimizer)
            return result

        # horovod's step() would synchronize *before* running the closure (i.e. before backward).
        with optimizer.skip_synchronize():  # type: ignore[attr-defined]  # hvd.DistributedOptimizer's
            output = super().optimizer_step(optimizer, closure_then_synchronize, model, **kwargs)
        self._synchronized.discard(id(optimizer))
        self._optimizer_steps += 1
        return output

    def _synchronize(self, optimizer: Any) -> None:
        optimizer.synchronize()
        self._synchronized.add(id(optimizer))

    # ------------------------------------------------------------------ collectives

    def _name(self, kind: str) -> str:
        # Horovod pairs collectives across ranks by name. Unnamed ones get per-process counters
        # that drift apart once ranks ran different numbers of ops (uneven data), so name them here.
        self._collective_seq += 1
        return f"lightning_mgpu.{kind}.{self._collective_seq}"

    def _collectives_enabled(self) -> bool:
        return self._initialized and runtime.horovod_torch().size() > 1

    @override
    def barrier(self, name: str | None = None) -> None:
        if self._collectives_enabled():
            self._join()

    @override
    def broadcast(self, obj: TBroadcast, src: int = 0) -> TBroadcast:
        if not self._collectives_enabled():
            return obj
        self._join()
        return runtime.horovod_torch().broadcast_object(obj, root_rank=src, name=self._name("broadcast"))

    @override
    def reduce(
        self,
        tensor: Tensor | Any,
        group: Any | None = None,
        reduce_op: ReduceOp | str | None = "mean",
    ) -> Tensor | Any:
        """Reduce ``tensor`` over all workers with ``hvd.allreduce``; non-tensors pass through.

        Raises:
            ValueError: ``group`` is given (Horovod has no sub-communicators here) or the op is unknown.
        """
        if group is not None:
            raise ValueError("HorovodStrategy.reduce does not support `group`; Horovod reduces over all workers.")
        if not isinstance(tensor, Tensor):
            return tensor
        hvd = runtime.horovod_torch()
        op = runtime.horovod_op(hvd, reduce_op)
        if not self._collectives_enabled():
            return tensor
        self._join()
        tensor = tensor.contiguous()  # Horovod refuses a strided view ("Tensor is required to be contiguous")
        if op == hvd.Average and not (tensor.is_floating_point() or tensor.is_complex()):
            return hvd.allreduce(tensor, op=hvd.Sum, name=self._name("reduce")) / hvd.size()
        return hvd.allreduce(tensor, op=op, name=self._name("reduce"))

    @override
    def all_gather(self, tensor: Tensor, group: Any | None = None, sync_grads: bool = False) -> Tensor:
        """Gather ``tensor`` from every worker into a new leading dimension of size ``world_size``.

        Raises:
            ValueError: ``group`` is given.
        """
        if group is not None and group != torch.distributed.group.WORLD:
            raise ValueError("HorovodStrategy.all_gather does not support `group`; Horovod gathers from all workers.")
        if not self._collectives_enabled():
            return tensor
        self._join()
        hvd = runtime.horovod_torch()
        with torch.enable_grad() if sync_grads else torch.no_grad():
            # Horovod refuses a strided view ("Tensor is required to be contiguous"), where torch gathers it.
            return hvd.allgather(tensor.contiguous().unsqueeze(0), name=self._name("all_gather"))

    @override
    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        if not self._collectives_enabled():
            return decision
        total = self.reduce(torch.tensor(int(decision), device=self.root_device), reduce_op="sum")
        return bool(total == self.world_size) if all else bool(total)

    def _join(self) -> None:
        """Wait for every worker with ``hvd.join()``: the cure for uneven data.

        A worker that runs out of batches first waits here and contributes zeros to the
        gradient allreduces of the workers still training, instead of deadlocking. Afterwards,
        if the workers took different numbers of optimizer steps, the one that joined last
        (which trained longest) broadcasts its weights and optimizer state to the others.
        """
        hvd = runtime.horovod_torch()
        # Where the joined worker creates the zero tensors it contributes: its GPU, or -1 for the CPU.
        device = -1
        if self.root_device.type == "cuda":
            device = self.root_device.index if self.root_device.index is not None else torch.cuda.current_device()
        last = hvd.join(device)
        trainer = self.lightning_module.trainer if self.lightning_module is not None else None
        if trainer is None or trainer.state.fn != TrainerFn.FITTING or not self.optimizers:
            return
        steps = torch.tensor([self._optimizer_steps, -self._optimizer_steps], dtype=torch.float64)
        most, least = hvd.allreduce(steps, op=hvd.Max, name=self._name("join.steps")).tolist()
        if most != -least:
            rank_zero_warn(
                f"Horovod workers ran different numbers of training steps ({-least:.0f} to {most:.0f}); their data was"
                f" uneven. Weights and optimizer state were re-synchronised from rank {last}, the last to finish."
            )
            self._broadcast_module_state(root=last)
            for optimizer in self.optimizers:
                self._broadcast_optimizer_state(optimizer, root=last)
            self._optimizer_steps = int(most)

    def _broadcast_module_state(self, root: int) -> None:
        if not self._collectives_enabled():
            return
        assert self.model is not None
        hvd = runtime.horovod_torch()
        state = {f"lightning_mgpu.state.{k}": v for k, v in self.model.state_dict().items() if isinstance(v, Tensor)}
        hvd.broadcast_parameters(state, root_rank=root)

    def _broadcast_optimizer_state(self, optimizer: Optimizer, root: int) -> None:
        """Give every worker ``root``'s optimizer state and hyper-parameters.

        Not ``hvd.broadcast_optimizer_state``: on a fresh optimizer it takes a zero-gradient
        ``step()`` to create the state, which moves weights under weight decay and counts a step
        for Adam. A fresh optimizer has no state to send; only its hyper-parameters travel then.
        """
        if not self._collectives_enabled():
            return
        hvd = runtime.horovod_torch()
        state = optimizer.state_dict()
        has_state = hvd.broadcast_object(bool(state["state"]), root_rank=root, name=self._name("opt.has_state"))
        if has_state:
            state = hvd.broadcast_object(state, root_rank=root, name=self._name("opt.state"))
            optimizer.load_state_dict(state)
            return
        groups = [{k: v for k, v in g.items() if k != "params"} for g in state["param_groups"]]
        groups = hvd.broadcast_object(groups, root_rank=root, name=self._name("opt.groups"))
        for group, options in zip(optimizer.param_groups, groups):
            group.update(options)

    # ------------------------------------------------------------------ learning rate

    def _apply_lr_scale(self, announce: bool = False) -> None:
        """Scale learning rates by ``hvd.size()``, relative to any scale a checkpoint carried in.

        The factor is stored in each param group (``horovod_lr_scale``) and on each scheduler, both of
        which checkpoints save; a resume at a different number of workers rescales instead of compounding.
        """
        factor = float(self.world_size)
        changes = []
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                ratio = factor / float(group.get("horovod_lr_scale", 1.0))
                if ratio != 1.0:
                    changes.append((group["lr"], group["lr"] * ratio))
                    group["lr"] *= ratio
                    if "initial_lr" in group:
                        group["initial_lr"] *= ratio
                group["horovod_lr_scale"] = factor
        for config in self.lr_scheduler_configs:
            scheduler = config.scheduler
            ratio = factor / float(getattr(scheduler, "horovod_lr_scale", 1.0))
            if hasattr(scheduler, "base_lrs") and ratio != 1.0:
                scheduler.base_lrs = [lr * ratio for lr in scheduler.base_lrs]
            setattr(scheduler, "horovod_lr_scale", factor)  # our mark on a torch scheduler
        if announce or changes:
            rates = ", ".join(f"{a:g} -> {b:g}" for a, b in changes) or "already scaled"
            rank_zero_info(f"HorovodStrategy(scale_lr=True): learning rates x {factor:g} (hvd.size()): {rates}")

    @override
    def on_train_start(self) -> None:
        if self._scale_lr:
            # A restored checkpoint may carry rates scaled for another number of workers.
            self._apply_lr_scale()
        self._log_effective_batch()

    def _log_effective_batch(self) -> None:
        assert self.lightning_module is not None
        trainer = self.lightning_module.trainer
        loader = trainer.train_dataloader
        batch = loader_batch_size(loader)
        accumulate = trainer.accumulate_grad_batches
        per_worker = str(batch) if batch else "per-worker batch"
        total = f" = {batch * self.world_size * accumulate}" if batch else ""
        rank_zero_info(
            f"HorovodStrategy: effective batch size = {per_worker} per worker x {self.world_size} workers"
            f" x {accumulate} accumulation{total}"
        )

    # ------------------------------------------------------------------ misc hooks

    def _convert_sync_batchnorm(self, model: Module) -> Module:
        """``Trainer(sync_batchnorm=True)``: Horovod's SyncBatchNorm (torch's needs torch.distributed)."""
        hvd = runtime.horovod_torch()
        if self.root_device.type != "cuda":
            raise ValueError(
                "Trainer(sync_batchnorm=True) with strategy='horovod' uses horovod.torch.SyncBatchNorm, which runs on"
                " GPUs only (as torch's SyncBatchNorm does under 'ddp'). Drop sync_batchnorm on CPU: each worker"
                " then normalises its own batch."
            )
        return _replace_batchnorm(model, hvd.SyncBatchNorm)

    @override
    def on_exception(self, exception: BaseException) -> None:
        # Teardown must not wait for the other workers: they may be stuck waiting for this one.
        self._failed = True
        if isinstance(exception, KeyboardInterrupt):
            return  # every worker stops on purpose; Lightning stops a self-launch's children after this one
        report = failed_rank_report(self)  # rank 0 of a self-launch: which worker died first, if one did
        if report:
            log.error(report)
        mark_failed = getattr(self.launcher, "mark_failed", None)
        if mark_failed is not None:
            mark_failed()

    @override
    def teardown(self) -> None:
        if self._collectives_enabled() and not self._failed:
            # Workers with fewer batches wait here for the others (see _join).
            self._join()
        for optimizer in self._distributed_optimizers():
            runtime.disarm(optimizer)
        super().teardown()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(
            cls.strategy_name, cls, description="Horovod ring all-reduce (horovodrun or self-launch)"
        )


def _replace_batchnorm(module: Module, sync_cls: type) -> Module:
    """Swap every ``BatchNorm*d`` for ``sync_cls``, keeping weights and running statistics."""
    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not isinstance(module, sync_cls):
        new = sync_cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
        new.load_state_dict(module.state_dict())
        new.train(module.training)
        return new
    for name, child in module.named_children():
        setattr(module, name, _replace_batchnorm(child, sync_cls))
    return module


def _refuse_bfloat16(model: Module, precision: str) -> None:
    """Refuse a model holding bfloat16 parameters or buffers before the first collective: Horovod 0.28.1's torch ops
    cover float32, float64, float16 and the integer types, not bfloat16 (``horovod.torch.mpi_ops._check_function``
    raised "Tensor type torch.BFloat16Tensor is not supported." from the first broadcast, mid-setup).

    Raises:
        MisconfigurationException: naming the precision and what to use instead.
    """
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    held = next(
        (name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.dtype == torch.bfloat16), None
    )
    if held is not None:
        raise MisconfigurationException(
            f"strategy='horovod' with precision={precision!r}: Horovod has no bfloat16 collectives, so {held!r} and "
            "the other bfloat16 tensors cannot be broadcast or averaged; use precision='bf16-mixed' (float32 "
            "parameters, bfloat16 compute), '16-true', or strategy='ddp'."
        )
