"""``sharded``: sharded data parallelism (ZeRO-2 with FairScale, ZeRO-1 with torch) on Lightning 2.x.

Lightning 2.0 removed ``ddp_sharded`` and ``ddp_sharded_spawn``. :class:`ShardedStrategy` brings them back:
each rank keeps only its shard of the optimizer state (and, with FairScale, of the reduced gradients), so
a model whose Adam state does not fit with plain DDP can fit.

Names registered with Lightning::

    Trainer(strategy="sharded")            # launched like "ddp" (one script per rank)
    Trainer(strategy="sharded_spawn")      # launched like "ddp_spawn"
    Trainer(strategy="ddp_sharded")        # Lightning 1.x alias of "sharded"
    Trainer(strategy="ddp_sharded_spawn")  # Lightning 1.x alias of "sharded_spawn"
    Trainer(strategy=ShardedStrategy(backend="torch"))  # torch's ZeroRedundancyOptimizer + DDP

Backends:

- ``"fairscale"`` (default): each optimizer becomes ``fairscale.optim.OSS`` and the module is wrapped in
  ``ShardedDataParallel``, which reduces every gradient only to the rank that owns it (ZeRO stage 2).
- ``"torch"``: each optimizer becomes ``torch.distributed.optim.ZeroRedundancyOptimizer`` and the module
  is wrapped in ``DistributedDataParallel`` (ZeRO stage 1: the optimizer state is sharded, gradients are
  all-reduced in full). FairScale has had no release since 2022; this keeps a path that works with
  future torch releases.
- ``"fsdp2"``: torch's ``fully_shard`` on each block, then the root (ZeRO-2 by default; ``reshard_after_forward=True``
  for ZeRO-3). Parameters, gradients and optimizer state are all sharded; the optimizer stays the user's own.
  Registered as ``sharded_fsdp2`` and ``sharded_fsdp2_spawn``.

Checkpoints hold plain model keys and the ordinary optimizer state, so they load into ``ddp``, ``dp``, ``horovod``,
a plain ``nn.Module``, and ``sharded`` on any number of ranks. ``checkpoint_format="full"`` (the default of the
FairScale and torch backends, as in Lightning 1.x) consolidates them on rank 0 into one file; ``"sharded"`` (the
default of fsdp2) has every rank write its own shards into a folder, and nothing is gathered
(``lightning_mgpu/utilities/sharded_checkpoint.py``).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.utilities.init import _has_meta_device_parameters_or_buffers, _materialize_distributed_module
from lightning.fabric.utilities.optimizer import (
    _optimizer_to_device,
    _optimizers_to_device,
)
from lightning.pytorch.core.optimizer import _MockOptimizer
from lightning.pytorch.overrides.distributed import _sync_module_states
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import Tensor
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.strategies._optim import rebind_schedulers, unwrap_optimizer
from lightning_mgpu.strategies._spawn import CleanExitSpawnLauncher
from lightning_mgpu.strategies._steps import StepRouting
from lightning_mgpu.strategies.sharded.optim import (
    is_sharded_optimizer,
    local_optimizer,
    local_optimizer_state_bytes,
    rebuild_optimizer,
)
from lightning_mgpu.strategies.sharded.precision import (
    ShardAwareGradScaler,
    ShardedDoublePrecision,
    ShardedHalfPrecision,
    ShardedMixedPrecision,
    ShardedPrecision,
    shard_aware_precision,
)
from lightning_mgpu.utilities.checkpoint import AtomicCheckpointIO, load_checkpoint_file
from lightning_mgpu.utilities.failures import on_training_failure
from lightning_mgpu.utilities.imports import require
from lightning_mgpu.utilities.modules import ModuleSpec, as_spec_list
from lightning_mgpu.utilities.ports import release_for_spawn
from lightning_mgpu.utilities.process_group import (
    destroy_at_exit,
)
from lightning_mgpu.utilities.sharded_checkpoint import (
    META_FILENAME,
    is_sharded_checkpoint,
    temporary_folder,
    write_sharded_checkpoint,
)

if TYPE_CHECKING:
    import lightning.pytorch as pl

Backend = Literal["fairscale", "torch", "fsdp2"]
_BACKENDS = ("fairscale", "torch", "fsdp2")
CheckpointFormat = Literal["sharded", "full"]
_FORMATS = ("sharded", "full")
# FairScale's bucket for small gradients, used by default across nodes (Lightning 1.x's choice: 8M elements).
_MULTI_NODE_REDUCE_BUFFER_SIZE = 2**23

__all__ = [
    "ShardAwareGradScaler",
    "ShardedDoublePrecision",
    "ShardedHalfPrecision",
    "ShardedMixedPrecision",
    "ShardedPrecision",
    "ShardedStrategy",
    "local_optimizer",
    "local_optimizer_state_bytes",
]


class ShardedStrategy(StepRouting, DDPStrategy):
    """Sharded data parallelism: each rank keeps its shard of the optimizer state (and gradients).

    Args:
        accelerator, parallel_devices, cluster_environment, checkpoint_io, precision_plugin: as for
            Lightning's ``DDPStrategy``; the Trainer normally fills them in.
        backend: ``"fairscale"`` (FairScale OSS + ShardedDataParallel, ZeRO-2; the default) or ``"torch"``
            (``ZeroRedundancyOptimizer`` + ``DistributedDataParallel``, ZeRO-1).
        reduce_buffer_size: FairScale only. Elements in the bucket that batches small gradient reductions;
            ``None`` picks 0 on one node and ``2**23`` on several (bucketed gradients are not sharded).
        find_unused_parameters: allow parameters that receive no gradient on some rank. torch: passed to
            DDP. FairScale has no such option; the strategy then reduces all gradients after the backward
            pass, in a fixed order, counting a missing gradient as zero (DDP leaves ``None`` for a parameter
            no rank used). This gives up overlapping the reduction with the backward pass. Off by default,
            as in DDP.
        broadcast_fp16: FairScale only. Broadcast the updated parameter shards in fp16. ``None`` turns it on
            for ``16-mixed`` across several nodes.
        reshard_after_forward: fsdp2 only. ``False`` (default, ZeRO-2) keeps each block's gathered parameters from its
            forward to its backward; ``True`` (ZeRO-3) frees them after forward and gathers them again in backward.
        fsdp_modules: fsdp2 only. The blocks that get their own ``fully_shard``, as ``ActivationCheckpointing`` chooses
            modules: classes, qualified-name patterns (``"net.blocks.*"``) or predicates. ``None``: every submodule
            holding parameters of its own. Whole blocks (a transformer layer) overlap communication best.
        checkpoint_format: ``"sharded"``: every rank writes its shards into a folder named like the checkpoint file
            (nothing is gathered; it loads on any number of ranks, and under other strategies through
            ``AtomicCheckpointIO``); ``"full"``: one file, consolidated on rank 0. ``None``: ``"sharded"`` for fsdp2,
            ``"full"`` for FairScale and torch (whose sharded format is not built yet).
        mp_policy: fsdp2 only. ``torch.distributed.fsdp.MixedPrecisionPolicy(param_dtype=..., reduce_dtype=...)``:
            parameters gathered and computed in ``param_dtype`` (the shards and the optimizer stay fp32), gradients
            reduced in ``reduce_dtype``. Use it instead of ``precision="bf16-mixed"``, not with it.
        offload_policy: fsdp2 only. ``torch.distributed.fsdp.CPUOffloadPolicy()``: shards, gradients and optimizer
            state live in CPU memory and the optimizer step runs there; each block is copied to the GPU to run.
        process_group_backend, timeout, start_method: as for ``DDPStrategy``.
        **kwargs: passed to ``ShardedDataParallel`` (FairScale; e.g. ``reduce_fp16``,
            ``auto_refresh_trainable``) or to ``DistributedDataParallel`` (torch; e.g. ``static_graph``).

    Raises:
        MissingDependencyError: ``backend="fairscale"`` and FairScale is not installed.
        ValueError: an unknown backend or checkpoint format, an option the backend does not accept, or (fsdp2)
            ``fsdp_modules`` matching nothing.

    Example::

        import lightning.pytorch as pl
        import lightning_mgpu  # registers "sharded", "sharded_spawn", "ddp_sharded", "ddp_sharded_spawn"
        from lightning_mgpu.strategies import ShardedStrategy

        trainer = pl.Trainer(strategy="sharded", accelerator="gpu", devices=4, precision="16-mixed")
        trainer = pl.Trainer(strategy=ShardedStrategy(backend="torch"), accelerator="gpu", devices=4)
        trainer = pl.Trainer(strategy=ShardedStrategy(backend="fsdp2", fsdp_modules=[nn.TransformerEncoderLayer]), devices=4)
    """

    strategy_name = "sharded"
    # the optional package the registered names need (shown by `python -m lightning_mgpu info`)
    optional_dependency: Optional[str] = "fairscale"

    def __init__(
        self,
        accelerator: Optional[pl.accelerators.Accelerator] = None,
        parallel_devices: Optional[list[torch.device]] = None,
        cluster_environment: Optional[ClusterEnvironment] = None,
        checkpoint_io: Optional[CheckpointIO] = None,
        precision_plugin: Optional[Precision] = None,
        backend: Backend = "fairscale",
        reduce_buffer_size: Optional[int] = None,
        find_unused_parameters: bool = False,
        broadcast_fp16: Optional[bool] = None,
        reshard_after_forward: Optional[bool] = None,
        fsdp_modules: Optional[Sequence[ModuleSpec]] = None,
        checkpoint_format: Optional[CheckpointFormat] = None,
        mp_policy: Optional[Any] = None,
        offload_policy: Optional[Any] = None,
        process_group_backend: Optional[str] = None,
        timeout: Optional[timedelta] = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        **kwargs: Any,
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"ShardedStrategy(backend={backend!r}) is not supported; choose one of {_BACKENDS}.")
        if checkpoint_format not in (None, *_FORMATS):
            raise ValueError(f"ShardedStrategy(checkpoint_format={checkpoint_format!r}) is not supported; choose one of {_FORMATS}.")
        if checkpoint_format == "sharded" and backend != "fsdp2":
            raise ValueError(
                f"ShardedStrategy(backend={backend!r}, checkpoint_format='sharded') is not supported yet: only FSDP2's"
                " state is held as DTensors that every rank can write its own part of. Use backend='fsdp2' for"
                " sharded checkpoints, or checkpoint_format='full' (one file, consolidated on rank 0)."
            )
        if backend == "fairscale":
            require("fairscale", "strategy='sharded' (backend='fairscale')")
        self._checkpoint_format: CheckpointFormat = checkpoint_format or ("sharded" if backend == "fsdp2" else "full")
        # Set by load_checkpoint when a sharded folder went straight into the sharded model and optimizers.
        self._restored_in_place = False
        # Set before the parent constructor, which assigns the precision plugin through our setter.
        self._backend: Backend = backend
        self._find_unused_parameters = bool(find_unused_parameters)
        self._reduce_buffer_size = reduce_buffer_size
        self._broadcast_fp16 = broadcast_fp16
        self._reshard_after_forward = bool(reshard_after_forward)
        self._fsdp_modules = None if fsdp_modules is None else as_spec_list(fsdp_modules)
        if backend != "fsdp2" and (mp_policy is not None or offload_policy is not None):
            raise ValueError(
                "ShardedStrategy(mp_policy=..., offload_policy=...) are FSDP2's policies; pass backend='fsdp2' or remove"
                " them (the other backends take Trainer(precision=...))."
            )
        self._mp_policy = mp_policy
        self._offload_policy = offload_policy
        _check_backend_options(backend, reduce_buffer_size, broadcast_fp16, kwargs, reshard_after_forward, fsdp_modules, self._find_unused_parameters)
        if backend == "torch":
            kwargs["find_unused_parameters"] = self._find_unused_parameters
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            # Atomic saves and safe loads by default (a kill mid-save never leaves a torn .ckpt).
            checkpoint_io=checkpoint_io if checkpoint_io is not None else AtomicCheckpointIO(),
            precision_plugin=precision_plugin,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            **kwargs,
        )

    @property
    def backend(self) -> Backend:
        """``"fairscale"``, ``"torch"`` or ``"fsdp2"``."""
        return self._backend

    @property
    def checkpoint_format(self) -> CheckpointFormat:
        """``"sharded"`` (a folder of per-rank shards) or ``"full"`` (one file consolidated on rank 0)."""
        return self._checkpoint_format

    @property
    def shards_gradients(self) -> bool:
        """Whether each rank holds only its shard of the reduced gradients (ZeRO-2: FairScale).

        Callbacks ask this capability instead of checking the class: with sharded gradients, loss scaling and
        clipping by norm must agree across ranks. torch's ZeRO-1 all-reduces full gradients, so no.
        """
        return self._backend in ("fairscale", "fsdp2")

    # ------------------------------------------------------------------ launch
    @override
    def _configure_launcher(self) -> None:
        if self._start_method == "popen":
            super()._configure_launcher()
            return
        assert self.cluster_environment is not None
        # A notebook's earlier in-process fit holds MASTER_PORT: the workers about to be spawned need a free one.
        release_for_spawn(self.cluster_environment, self.num_nodes)
        self._launcher = CleanExitSpawnLauncher(self, start_method=self._start_method)

    # ------------------------------------------------------------------ precision
    @property  # type: ignore[override]
    @override
    def precision_plugin(self) -> Precision:
        if self._precision_plugin is None:
            self._precision_plugin = self._shard_aware(Precision())
        return self._precision_plugin

    @precision_plugin.setter
    @override
    def precision_plugin(self, precision_plugin: Optional[Precision]) -> None:
        self._precision_plugin = None if precision_plugin is None else self._shard_aware(precision_plugin)

    def _shard_aware(self, plugin: Precision) -> Precision:
        return shard_aware_precision(plugin, shards_gradients=self.shards_gradients)

    # ------------------------------------------------------------------ setup
    @override
    def setup(self, trainer: pl.Trainer) -> None:
        assert self.accelerator is not None
        assert self.model is not None
        self.accelerator.setup(trainer)
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and self._layer_sync:
            self.model = self._layer_sync.apply(self.model)
        self.model = self.precision_plugin.convert_module(self.model)
        if not _has_meta_device_parameters_or_buffers(self.model):  # built on meta: fully_shard, then materialised
            self.model_to_device()
        if fitting:
            self._note_single_process()
            if self._backend == "fairscale":
                # OSS must exist before ShardedDataParallel, which reduces each gradient to its OSS owner.
                self.setup_optimizers(trainer)
                self._shard_optimizers()
                self._wrap_sharded_data_parallel()
            elif self._backend == "fsdp2":
                # The optimizers must be built on the sharded (DTensor) parameters: fully_shard first.
                self._fully_shard()
                self.setup_optimizers(trainer)
            else:
                self.configure_ddp()
                self.setup_optimizers(trainer)
                self._shard_optimizers()
        elif not self._is_fully_sharded():
            # Validation, test and predict run on the bare module; only the states need to agree.
            _sync_module_states(self.model)
        self.setup_precision_plugin()
        if fitting:
            _optimizers_to_device(self.optimizers, self.root_device)

    def _fully_shard(self) -> None:
        from lightning_mgpu.strategies.sharded.fsdp2 import apply_fully_shard

        assert self.model is not None
        on_meta = _has_meta_device_parameters_or_buffers(self.model)
        if not on_meta:
            # fully_shard keeps each rank's own slice of the weights it is given: start from rank 0's, as DDP does.
            _sync_module_states(self.model)
        blocks = apply_fully_shard(
            self.model, self.world_size, self.root_device.type, self._reshard_after_forward, self._fsdp_modules,
            mp_policy=self._mp_policy, offload_policy=self._offload_policy,
        )  # fmt: skip
        if on_meta:
            # Built in configure_model on the meta device: each rank allocates its shards only, then reset_parameters()
            # initialises them (DTensor-aware, so the ranks draw one consistent tensor). The whole model never exists.
            _materialize_distributed_module(self.model, self.root_device)
        rank_zero_info(
            f"strategy='sharded' (fsdp2): {len(blocks)} block(s) and the root sharded over {self.world_size} rank(s),"
            f" reshard_after_forward={self._reshard_after_forward} ({'ZeRO-3' if self._reshard_after_forward else 'ZeRO-2'})"
            + (", built on the meta device and materialised shard by shard." if on_meta else ".")
        )

    @contextmanager
    @override
    def model_sharded_context(self) -> Generator[None, None, None]:
        """fsdp2, when fitting: ``configure_model`` builds the layers on the meta device (no memory), and ``setup``
        materialises only each rank's shards after ``fully_shard``. Elsewhere (other backends, validate/test/predict on
        the bare module) layers are built as usual."""
        if self._backend == "fsdp2" and self._fitting():
            with torch.device("meta"):
                yield
        else:
            yield

    def _fitting(self) -> bool:
        trainer = getattr(self.lightning_module, "_trainer", None)
        return trainer is not None and trainer.state.fn == TrainerFn.FITTING

    def _is_fully_sharded(self) -> bool:
        if self._backend != "fsdp2" or self.model is None:
            return False
        from lightning_mgpu.strategies.sharded.fsdp2 import is_fully_sharded

        return is_fully_sharded(self.model)

    def _note_single_process(self) -> None:
        if self.world_size == 1:
            rank_zero_info(
                "strategy='sharded' on a single process: there is nothing to shard, the one rank holds the whole"
                " optimizer state. Training runs normally; use devices > 1 (or several nodes) to save memory."
            )

    def _shard_optimizers(self) -> None:
        """Rebuild every optimizer as OSS/ZeRO and re-bind the LR schedulers to the new optimizers."""
        replacements: dict[int, Optimizer] = {}
        optimizers = []
        for optimizer in self.optimizers:
            optimizer = unwrap_optimizer(optimizer)
            if isinstance(optimizer, _MockOptimizer) or is_sharded_optimizer(optimizer):
                optimizers.append(optimizer)
                continue
            sharded = rebuild_optimizer(optimizer, self._optimizer_factory(), self._backend)
            replacements[id(optimizer)] = sharded
            optimizers.append(sharded)
        rebind_schedulers(self.lr_scheduler_configs, replacements)
        self.optimizers = optimizers

    def _optimizer_factory(self) -> Any:
        if self._backend == "fairscale":
            from lightning_mgpu.strategies.sharded.fairscale import make_oss

            return make_oss(broadcast_fp16=self._resolved_broadcast_fp16())
        from lightning_mgpu.strategies.sharded.zero import make_zero

        return make_zero()

    def _resolved_broadcast_fp16(self) -> bool:
        if self._broadcast_fp16 is not None:
            return self._broadcast_fp16
        # fp16 parameter broadcasts halve the inter-node traffic and are safe under AMP (Lightning 1.x default).
        return getattr(self.precision_plugin, "precision", None) == "16-mixed" and self.num_nodes > 1

    def _resolved_reduce_buffer_size(self) -> int:
        if self._reduce_buffer_size is not None:
            return self._reduce_buffer_size
        # Buckets help across nodes; on one node they only cost memory (bucketed grads are not sharded).
        return _MULTI_NODE_REDUCE_BUFFER_SIZE if self.num_nodes > 1 else 0

    def _wrap_sharded_data_parallel(self) -> None:
        from lightning_mgpu.strategies.sharded.fairscale import wrap_module

        kwargs = {**self._ddp_kwargs, "reduce_buffer_size": self._resolved_reduce_buffer_size()}
        oss = [opt for opt in self.optimizers if is_sharded_optimizer(opt)]
        if not oss:
            return
        self.model = wrap_module(self.model, oss, **kwargs)
        self._point_lightning_optimizers_at_zero_grad()

    @property  # type: ignore[override]
    @override
    def optimizers(self) -> list[Optimizer]:
        return self._optimizers

    @optimizers.setter
    @override
    def optimizers(self, optimizers: list[Optimizer]) -> None:
        # The parent setter rebuilds the LightningOptimizer wrappers; they need the bucket-safe zero_grad again.
        DDPStrategy.optimizers.fset(self, optimizers)  # type: ignore[attr-defined]
        self._point_lightning_optimizers_at_zero_grad()

    def _point_lightning_optimizers_at_zero_grad(self) -> None:
        """Make ``self.optimizers().zero_grad()`` (manual optimization) the bucket-safe one of the OSS it wraps.

        LightningOptimizer subclasses the wrapped optimizer's class and forwards only missing attributes, so it
        finds OSS's class ``zero_grad`` before the instance attribute ``wrap_module`` installed on the OSS. That
        ``zero_grad`` frees the bucketed gradients and the ranks silently diverge (``reduce_buffer_size > 0``).
        """
        if self._backend != "fairscale":
            return
        from lightning_mgpu.strategies.sharded.fairscale import bucket_safe_zero_grad

        for lightning_optimizer in self._lightning_optimizers:
            zero_grad = bucket_safe_zero_grad(unwrap_optimizer(lightning_optimizer))
            if zero_grad is not None:
                lightning_optimizer.zero_grad = zero_grad  # type: ignore[method-assign]

    def _sharded_data_parallel(self) -> Any:
        """The ShardedDataParallel wrapper, or ``None`` (torch backend, not fitting, FairScale not loaded)."""
        if self._backend != "fairscale":
            return None
        from lightning_mgpu.strategies.sharded.fairscale import ShardedDataParallel

        return self.model if isinstance(self.model, ShardedDataParallel) else None

    # ------------------------------------------------------------------ training
    @contextmanager
    @override
    def block_backward_sync(self) -> Generator:
        """Skip gradient reduction inside the context (non-final micro-batches of gradient accumulation).

        Lightning's automatic loop and ``LightningOptimizer.toggle_model(sync_grad=False)`` call this.
        """
        sdp = self._sharded_data_parallel()
        if sdp is not None:
            with sdp.no_sync():
                yield None
        elif self._is_fully_sharded():
            from lightning_mgpu.strategies.sharded.fsdp2 import no_sync

            assert self.model is not None
            with no_sync(self.model):
                yield None
        else:
            with super().block_backward_sync():
                yield None

    @override
    def backward(self, closure_loss: Tensor, optimizer: Optional[Optimizer], *args: Any, **kwargs: Any) -> Tensor:
        sdp = self._sharded_data_parallel()
        if sdp is None or not sdp.training:
            return super().backward(closure_loss, optimizer, *args, **kwargs)
        from lightning_mgpu.strategies.sharded.fairscale import (
            arm_reduction,
            reduce_in_fixed_order,
        )

        # Each backward reduces what requires grad now: manual optimization may run several per forward, e.g.
        # one per optimizer of a GAN, with toggle_model() freezing the other optimizers' parameters.
        partial = arm_reduction(sdp)
        if not partial and not self._find_unused_parameters:
            # FairScale's hooks reduce each gradient as autograd finishes it, overlapping the backward pass.
            return super().backward(closure_loss, optimizer, *args, **kwargs)
        # Strategy.backward, with the reduction moved out of the autograd hooks, for two reasons. Ranks that use
        # different parameters finish their gradients in different orders, so reduce afterwards in a fixed
        # order. A partial backward must not reduce the buckets, which also hold the frozen gradients.
        assert self.lightning_module is not None
        self.pre_backward(closure_loss)
        closure_loss = self.precision_plugin.pre_backward(closure_loss, self.lightning_module)
        accumulating = sdp._should_accumulate_grads
        with sdp.no_sync():
            self.precision_plugin.backward(closure_loss, self.lightning_module, optimizer, *args, **kwargs)
        if not accumulating:
            reduce_in_fixed_order(sdp, missing_as_zero=self._find_unused_parameters)
        closure_loss = self.precision_plugin.post_backward(closure_loss, self.lightning_module)
        self.post_backward(closure_loss)
        return closure_loss

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        super().post_backward(closure_loss)
        sdp = self._sharded_data_parallel()
        if sdp is None:
            return
        from lightning_mgpu.strategies.sharded.fairscale import params_not_reduced

        missing = params_not_reduced(sdp)
        if missing:
            # Fail now, on this rank: the other ranks wait in a reduce that this rank never issues, and this
            # process exiting is what releases them (instead of a hang until the collective timeout).
            raise RuntimeError(self._unused_parameters_message(missing))

    def _unused_parameters_message(self, missing: list[Tensor]) -> str:
        assert self.lightning_module is not None
        names = {id(p): n for n, p in self.lightning_module.named_parameters()}
        listed = [names.get(id(p), f"<unnamed {tuple(p.shape)}>") for p in missing]
        shown = ", ".join(listed[:10]) + (f", ... ({len(listed) - 10} more)" if len(listed) > 10 else "")
        return (
            f"strategy='sharded': {len(missing)} parameter(s) that require grad received no gradient in this backward"
            f" pass on rank {self.global_rank}: [{shown}]. ShardedDataParallel reduces each gradient with its own"
            " collective, so ranks that skip different parameters fall out of step and hang. Pass"
            " `Trainer(strategy=ShardedStrategy(find_unused_parameters=True))`, or freeze the parameters that do"
            " not take part in the loss with `requires_grad_(False)`."
        )

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        sdp = self._sharded_data_parallel()
        if sdp is not None:
            from lightning_mgpu.strategies.sharded.fairscale import follow_module_mode

            follow_module_mode(sdp)
        return super().training_step(*args, **kwargs)

    def _step_runner(self, step_name: str) -> Any:
        # Validation, test and predict run on the bare module: no gradients to reduce, and ShardedDataParallel
        # would rebuild its hooks and buckets each time it sees the module switch between train and eval.
        if step_name == "training_step" or self._is_fully_sharded():
            return None  # Lightning's path; under fsdp2 the step methods are registered with FSDP to gather parameters
        assert self.lightning_module is not None
        return getattr(self.lightning_module, step_name)

    # ------------------------------------------------------------------ checkpoints
    def _saves_sharded(self) -> bool:
        return self._checkpoint_format == "sharded" and self._is_fully_sharded()

    @property
    @override
    def restore_checkpoint_after_setup(self) -> bool:
        # fsdp2: a sharded folder loads into the sharded model and its optimizers, which setup() creates.
        return self._backend == "fsdp2"

    @property
    @override
    def lightning_restore_optimizer(self) -> bool:
        return not self._restored_in_place

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Optional[Any] = None) -> None:
        """One file from rank 0 (``"full"``), or under fsdp2 with ``"sharded"`` a folder that every rank writes its
        shards into, swapped into place atomically by rank 0. Called on every rank (Lightning's ``save_checkpoint``)."""
        if not self._saves_sharded():
            super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)
            return
        if storage_options is not None:
            raise TypeError(f"ShardedStrategy(checkpoint_format='sharded') saves take no storage_options, got {storage_options!r}.")
        # Rank 0's path and one temporary folder beside it for all ranks: the shards of this save must land together
        # (a caller may pass each rank its own path, as Ray's report callback does with per-rank temporary folders).
        # Across nodes this needs a filesystem they share, as Lightning's FSDP sharded checkpoints do.
        filepath = self.broadcast(str(filepath))
        tmp = Path(self.broadcast(str(temporary_folder(filepath))))
        write_sharded_checkpoint(checkpoint, filepath, tmp, coordinator=self.is_global_zero)

    @override
    def load_checkpoint(self, checkpoint_path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """A sharded folder goes straight into the sharded model and optimizers (each rank reads what overlaps its
        shards, so any number of ranks can load it); anything else is read whole through the checkpoint IO."""
        self._restored_in_place = False
        path = Path(checkpoint_path)
        if not (self._is_fully_sharded() and is_sharded_checkpoint(path)):
            return super().load_checkpoint(checkpoint_path, *args, **kwargs)
        from lightning_mgpu.strategies.sharded.fsdp2 import load_sharded_checkpoint

        assert self.lightning_module is not None
        load_sharded_checkpoint(self.lightning_module, [unwrap_optimizer(o) for o in self.optimizers], path)
        self._restored_in_place = True
        return load_checkpoint_file(path / META_FILENAME, trusted=kwargs.get("weights_only") is False)

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The full, unsharded optimizer state on rank 0 and ``{}`` elsewhere (``"sharded"`` under fsdp2: this rank's
        shards, on every rank).

        Consolidation is a collective: every rank must call this (Lightning's ``dump_checkpoint`` does, on
        every rank); only rank 0 then writes the checkpoint.
        """
        optimizer = unwrap_optimizer(optimizer)
        if self._saves_sharded():
            from lightning_mgpu.strategies.sharded.fsdp2 import sharded_optimizer_state

            assert self.lightning_module is not None
            return sharded_optimizer_state(self.lightning_module, optimizer)
        if self._is_fully_sharded():
            from lightning_mgpu.strategies.sharded.fsdp2 import full_optimizer_state

            assert self.lightning_module is not None
            state = full_optimizer_state(self.lightning_module, optimizer)
            return state if self.is_global_zero else {}
        if not is_sharded_optimizer(optimizer):
            return optimizer.state_dict()
        from torch.distributed.optim import ZeroRedundancyOptimizer

        if isinstance(optimizer, ZeroRedundancyOptimizer):
            optimizer.consolidate_state_dict(to=0)
            store = "_all_state_dicts"
        else:
            optimizer.consolidate_state_dict(recipient_rank=0)
            store = "_all_states"
        if not self.is_global_zero:
            return {}
        state = optimizer.state_dict()
        # The consolidated copy of every rank's shard would otherwise stay on rank 0 until the next save.
        setattr(optimizer, store, [])
        return state

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Load the ordinary (unsharded) optimizer states; each rank keeps only its shard."""
        if self._restored_in_place:  # a sharded folder: load_checkpoint has loaded them
            return
        for optimizer, opt_state in zip(self.optimizers, checkpoint["optimizer_states"]):
            optimizer = unwrap_optimizer(optimizer)
            if self._is_fully_sharded():
                from lightning_mgpu.strategies.sharded.fsdp2 import load_full_optimizer_state

                assert self.lightning_module is not None
                load_full_optimizer_state(self.lightning_module, optimizer, opt_state)
                continue
            if not is_sharded_optimizer(optimizer):
                optimizer.load_state_dict(opt_state)
                _optimizer_to_device(optimizer, self.root_device)
                continue
            # OSS/ZeRO blank the entries of other ranks in the dict they are given: give them a copy, so the
            # loaded checkpoint stays whole for anything else that reads it.
            optimizer.load_state_dict({**opt_state, "state": dict(opt_state["state"])})
            # Their wrapper's own `state` is unused (the shard's optimizer holds the state) but now references
            # the loaded shard; on GPU it is a second copy. Drop it to keep the 1/N memory saving.
            optimizer.state.clear()
            _optimizer_to_device(optimizer.optim, self.root_device)

    @override
    def lightning_module_state_dict(self) -> dict[str, Any]:
        """Plain keys; under fsdp2 the whole model gathered to rank 0 (a collective; ``{}`` on other ranks), or with
        ``"sharded"`` this rank's shards (DTensors)."""
        if self._saves_sharded():
            from lightning_mgpu.strategies.sharded.fsdp2 import sharded_model_state

            assert self.lightning_module is not None
            return sharded_model_state(self.lightning_module)
        if self._is_fully_sharded():
            from lightning_mgpu.strategies.sharded.fsdp2 import full_model_state

            assert self.lightning_module is not None
            return full_model_state(self.lightning_module)
        return super().lightning_module_state_dict()

    def handoff_state_dict(self) -> dict[str, Any]:
        """The weights a spawn launcher hands to the launching process after ``fit``: whole plain tensors (rank 0;
        a collective under fsdp2), never DTensors, which the launching process has no process group for."""
        if self._is_fully_sharded():
            from lightning_mgpu.strategies.sharded.fsdp2 import full_model_state

            assert self.lightning_module is not None
            return full_model_state(self.lightning_module)
        assert self.lightning_module is not None
        return self.lightning_module.state_dict()

    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        if self._restored_in_place:  # a sharded folder: load_checkpoint has loaded the model
            return
        if self._is_fully_sharded():  # loaded after fully_shard (e.g. by a callback): scatter the whole state
            from lightning_mgpu.strategies.sharded.fsdp2 import load_full_model_state

            assert self.lightning_module is not None
            load_full_model_state(self.lightning_module, dict(checkpoint["state_dict"]), strict=strict)
            return
        super().load_model_state_dict(checkpoint, strict=strict)

    # ------------------------------------------------------------------ teardown
    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        # Destroy the process group at exit after success: a gloo worker can abort at shutdown otherwise.
        destroy_at_exit()

    @override
    def on_exception(self, exception: BaseException) -> None:
        super().on_exception(exception)
        # Keep the group (other ranks may be inside a collective); under the script launcher, name a dead rank
        # (not after Ctrl-C, where every rank stops on purpose).
        on_training_failure(self, report=not isinstance(exception, KeyboardInterrupt))

    @override
    def teardown(self) -> None:
        sdp = self._sharded_data_parallel()
        if sdp is not None:
            from lightning_mgpu.strategies.sharded.fairscale import remove_grad_hooks

            remove_grad_hooks(sdp)
            self.model = self.lightning_module
        super().teardown()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> list[str]:
        presets = {
            cls.strategy_name: ("popen", "Sharded data parallel (FairScale OSS + ShardedDataParallel, ZeRO-2), launched like ddp", {}),
            "sharded_spawn": ("spawn", "Sharded data parallel (FairScale OSS + ShardedDataParallel, ZeRO-2), launched like ddp_spawn", {}),
            "ddp_sharded": ("popen", "Alias of `sharded` (the Lightning 1.x name)", {}),
            "ddp_sharded_spawn": ("spawn", "Alias of `sharded_spawn` (the Lightning 1.x name)", {}),
            # Lightning 1.9's explicit spellings (its tests checked that they set find_unused_parameters=False).
            "ddp_sharded_find_unused_parameters_false": ("popen", "`sharded` with find_unused_parameters=False (Lightning 1.x name)", {"find_unused_parameters": False}),
            "ddp_sharded_spawn_find_unused_parameters_false": ("spawn", "`sharded_spawn` with find_unused_parameters=False (Lightning 1.x name)", {"find_unused_parameters": False}),
            # Lightning 2.x's pattern (`ddp_find_unused_parameters_true`) for the opt-in.
            "sharded_find_unused_parameters_true": ("popen", "`sharded` with find_unused_parameters=True", {"find_unused_parameters": True}),
            "sharded_spawn_find_unused_parameters_true": ("spawn", "`sharded_spawn` with find_unused_parameters=True", {"find_unused_parameters": True}),
            # torch FSDP2 (maintained; no FairScale needed): ZeRO-2 by default.
            "sharded_fsdp2": ("popen", "Sharded data parallel on torch FSDP2 (fully_shard, ZeRO-2), launched like ddp", {"backend": "fsdp2"}),
            "sharded_fsdp2_spawn": ("spawn", "Sharded data parallel on torch FSDP2 (fully_shard, ZeRO-2), launched like ddp_spawn", {"backend": "fsdp2"}),
        }
        for name, (start_method, description, extra) in presets.items():
            strategy_registry.register(name, cls, description=description, start_method=start_method, **extra)
        return list(presets)


def _check_backend_options(
    backend: str,
    reduce_buffer_size: Optional[int],
    broadcast_fp16: Optional[bool],
    kwargs: dict[str, Any],
    reshard_after_forward: Optional[bool],
    fsdp_modules: Any,
    find_unused: bool,
) -> None:
    """Reject options the chosen backend would ignore or fail on late, naming the fix."""
    if reduce_buffer_size is not None and reduce_buffer_size < 0:
        raise ValueError(f"ShardedStrategy(reduce_buffer_size={reduce_buffer_size}) must be >= 0 (0 disables bucketing).")
    if backend != "fsdp2" and (reshard_after_forward is not None or fsdp_modules is not None):
        raise ValueError(
            "ShardedStrategy(reshard_after_forward=..., fsdp_modules=...) are options of backend='fsdp2'; pass"
            " backend='fsdp2' or remove them."
        )
    if backend == "fsdp2":
        if find_unused:
            raise ValueError(
                "ShardedStrategy(backend='fsdp2', find_unused_parameters=True) is not supported: FSDP2 reduce-scatters"
                " per block, and ranks that skip different parameters would fall out of step. Use backend='torch' (DDP's"
                " find_unused_parameters) or backend='fairscale'."
            )
        given = [n for n, v in (("reduce_buffer_size", reduce_buffer_size), ("broadcast_fp16", broadcast_fp16)) if v is not None]
        given += sorted(kwargs)
        if given:
            raise ValueError(
                f"ShardedStrategy(backend='fsdp2') does not take {given}: those are FairScale's or DDP's options. FSDP2's"
                " are reshard_after_forward and fsdp_modules."
            )
        return
    if backend == "torch":
        if reduce_buffer_size is not None:
            raise ValueError(
                "ShardedStrategy(reduce_buffer_size=...) is a FairScale option; with backend='torch' DDP buckets the"
                " gradients: pass `bucket_cap_mb=...` instead."
            )
        if broadcast_fp16:
            raise ValueError("ShardedStrategy(broadcast_fp16=True) is a FairScale option; remove it with backend='torch'.")
        if kwargs.get("model_averaging_period") is not None:
            raise ValueError("ShardedStrategy does not support post-local SGD model averaging; use strategy='ddp' for it.")
        from lightning_mgpu.strategies.sharded.zero import DDP_OPTIONS

        allowed = set(DDP_OPTIONS)
        where = "torch.nn.parallel.DistributedDataParallel"
    else:
        from lightning_mgpu.strategies.sharded.fairscale import SDP_OPTIONS

        allowed = set(SDP_OPTIONS) - {"reduce_buffer_size"}
        where = "fairscale's ShardedDataParallel"
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(
            f"ShardedStrategy(backend={backend!r}) got option(s) {unknown} that {where} does not accept. Accepted:"
            f" {sorted(allowed)}."
            + (" For DDP's options use backend='torch'." if backend == "fairscale" else "")
        )
