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

import importlib
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.utilities.init import _has_meta_device_parameters_or_buffers
from lightning.fabric.utilities.optimizer import _optimizers_to_device
from lightning.pytorch.overrides.distributed import _sync_module_states
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import Tensor
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.strategies._optim import unwrap_optimizer
from lightning_mgpu.strategies._spawn import CleanExitSpawnLauncher
from lightning_mgpu.strategies._steps import StepRouting
from lightning_mgpu.strategies.sharded.backend import CheckpointFormat, ShardedOptions, ShardingBackend
from lightning_mgpu.strategies.sharded.optim import (
    local_optimizer,
    local_optimizer_state_bytes,
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
from lightning_mgpu.utilities.imports import install_hint as _install_hint
from lightning_mgpu.utilities.imports import require
from lightning_mgpu.utilities.modules import ModuleSpec, as_spec_list
from lightning_mgpu.utilities.ports import release_for_spawn
from lightning_mgpu.utilities.process_group import destroy_at_exit
from lightning_mgpu.utilities.sharded_checkpoint import (
    META_FILENAME,
    is_sharded_checkpoint,
    temporary_folder,
    write_sharded_checkpoint,
)

if TYPE_CHECKING:
    import lightning.pytorch as pl

Backend = Literal["fairscale", "torch", "fsdp2"]
#: Each backend's class, imported when chosen, and the optional package it needs (FairScale's module imports it).
_BACKEND_CLASSES = {
    "fairscale": ("lightning_mgpu.strategies.sharded.fairscale:FairScaleBackend", "fairscale"),
    "torch": ("lightning_mgpu.strategies.sharded.zero:TorchZeroBackend", None),
    "fsdp2": ("lightning_mgpu.strategies.sharded.fsdp2:FSDP2Backend", None),
}
_BACKENDS = tuple(_BACKEND_CLASSES)
_FORMATS = ("sharded", "full")

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


def backend_class(name: str) -> type[ShardingBackend]:
    """The :class:`~lightning_mgpu.strategies.sharded.backend.ShardingBackend` subclass of backend ``name``.

    Raises:
        MissingDependencyError: the backend's optional package is not installed (the message names the extra).
    """
    where, package = _BACKEND_CLASSES[name]
    if package is not None:
        require(package, f"strategy='sharded' (backend={name!r})")
    module, _, cls = where.partition(":")
    return getattr(importlib.import_module(module), cls)


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
            ``"full"`` for FairScale and torch (one file, as in Lightning 1.x; their ``"sharded"`` folder holds each
            rank's optimizer shard, and the model, the same on every rank, once).
        async_save: with ``checkpoint_format="sharded"``, saves made while fitting return once the shards are copied to
            CPU memory, and each rank writes them in a background thread (``torch.distributed.checkpoint.async_save``,
            over a gloo group of its own); the folder lands atomically when the last rank is done. The next save, the
            end of ``fit`` and the interpreter's exit wait for it (:meth:`wait_for_checkpoint`). Costs one copy of the
            rank's shards in CPU memory while a save is in flight.
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
    # the optional package the default backend needs (shown by `lightning-mgpu info`; per name: dependency_for)
    optional_dependency: str | None = "fairscale"
    install_hint = _install_hint("fairscale")  # a capability (lightning_mgpu/utilities/capabilities.py)

    @classmethod
    def dependency_for(cls, init_params: dict[str, Any]) -> str | None:
        """The optional package a registered name needs: its backend's (torch ZeRO and FSDP2 need none)."""
        return _BACKEND_CLASSES[init_params.get("backend", "fairscale")][1]

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        backend: Backend = "fairscale",
        reduce_buffer_size: int | None = None,
        find_unused_parameters: bool = False,
        broadcast_fp16: bool | None = None,
        reshard_after_forward: bool | None = None,
        fsdp_modules: Sequence[ModuleSpec] | None = None,
        checkpoint_format: CheckpointFormat | None = None,
        async_save: bool = False,
        mp_policy: Any | None = None,
        offload_policy: Any | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        **kwargs: Any,
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"ShardedStrategy(backend={backend!r}) is not supported; choose one of {_BACKENDS}.")
        if checkpoint_format not in (None, *_FORMATS):
            raise ValueError(
                f"ShardedStrategy(checkpoint_format={checkpoint_format!r}) is not supported; choose one of {_FORMATS}."
            )
        impl_cls = backend_class(backend)
        if checkpoint_format == "sharded" and not impl_cls.writes_sharded_checkpoints:
            raise ValueError(
                f"ShardedStrategy(backend={backend!r}, checkpoint_format='sharded') is not supported: this backend's"
                " ranks cannot write their own parts. Use checkpoint_format='full' (one file, consolidated on rank 0)."
            )
        options = ShardedOptions(
            reduce_buffer_size=reduce_buffer_size,
            find_unused_parameters=bool(find_unused_parameters),
            broadcast_fp16=broadcast_fp16,
            reshard_after_forward=reshard_after_forward,
            fsdp_modules=None if fsdp_modules is None else as_spec_list(fsdp_modules),
            mp_policy=mp_policy,
            offload_policy=offload_policy,
            wrapper_kwargs=dict(kwargs),
        )
        impl_cls.check_options(options)
        # Set before the parent constructor, which assigns the precision plugin through our setter.
        self._backend: Backend = backend
        self._impl: ShardingBackend = impl_cls(self, options)
        self._checkpoint_format: CheckpointFormat = checkpoint_format or impl_cls.default_checkpoint_format
        if async_save and self._checkpoint_format != "sharded":
            raise ValueError(
                "ShardedStrategy(async_save=True) writes sharded folders in the background; pass"
                " checkpoint_format='sharded' with it (a full checkpoint is gathered to rank 0 first: use Lightning's"
                " AsyncCheckpointIO plugin for files)."
            )
        self._async_save = async_save
        self._async_group: Any = None
        self._pending_save: Future | None = None
        self._failed = False
        # Set by load_checkpoint when a sharded folder went straight into the sharded model and optimizers.
        self._restored_in_place = False
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
            **self._impl.ddp_kwargs(),
        )

    @property
    def backend(self) -> Backend:
        """``"fairscale"``, ``"torch"`` or ``"fsdp2"``."""
        return self._backend

    @property
    def options(self) -> ShardedOptions:
        """The backend options this strategy was built with (checked against the backend)."""
        return self._impl.options

    @property
    def checkpoint_format(self) -> CheckpointFormat:
        """``"sharded"`` (a folder of per-rank shards) or ``"full"`` (one file consolidated on rank 0)."""
        return self._checkpoint_format

    @property
    def shards_gradients(self) -> bool:
        """Whether each rank holds only its shard of the reduced gradients (ZeRO-2: FairScale, FSDP2).

        Callbacks ask this capability instead of checking the class: with sharded gradients, loss scaling and
        clipping by norm must agree across ranks. torch's ZeRO-1 all-reduces full gradients, so no.
        """
        return self._impl.shards_gradients

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
    def precision_plugin(self, precision_plugin: Precision | None) -> None:
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
        if not _has_meta_device_parameters_or_buffers(self.model):  # built on meta: sharded, then materialised
            self.model_to_device()
        if fitting:
            self._note_single_process()
            self._impl.setup_fit(trainer)
        elif not self._impl.model_is_sharded():
            # Validation, test and predict run on the bare module; only the states need to agree.
            _sync_module_states(self.model)
        self.setup_precision_plugin()
        if fitting:
            _optimizers_to_device(self.optimizers, self.root_device)

    @contextmanager
    @override
    def model_sharded_context(self) -> Generator[None, None, None]:
        """Where ``configure_model`` builds the layers: under fsdp2 while fitting, on the meta device (no memory), and
        ``setup`` materialises only each rank's shards. Elsewhere layers are built as usual."""
        with self._impl.sharded_context(self._fitting()):
            yield

    def _fitting(self) -> bool:
        trainer = getattr(self.lightning_module, "_trainer", None)
        return trainer is not None and trainer.state.fn == TrainerFn.FITTING

    def _note_single_process(self) -> None:
        if self.world_size == 1:
            rank_zero_info(
                "strategy='sharded' on a single process: there is nothing to shard, the one rank holds the whole"
                " optimizer state. Training runs normally; use devices > 1 (or several nodes) to save memory."
            )

    @property  # type: ignore[override]
    @override
    def optimizers(self) -> list[Optimizer]:
        return self._optimizers

    @optimizers.setter
    @override
    def optimizers(self, optimizers: list[Optimizer]) -> None:
        # The parent setter rebuilds the LightningOptimizer wrappers; the backend may need to adjust them again.
        DDPStrategy.optimizers.fset(self, optimizers)  # type: ignore[attr-defined]
        self._impl.on_optimizers_set()

    # ------------------------------------------------------------------ training
    @contextmanager
    @override
    def block_backward_sync(self) -> Generator:
        """Skip gradient reduction inside the context (non-final micro-batches of gradient accumulation).

        Lightning's automatic loop and ``LightningOptimizer.toggle_model(sync_grad=False)`` call this.
        """
        context = self._impl.no_sync()
        if context is None:
            with super().block_backward_sync():
                yield None
        else:
            with context:
                yield None

    @override
    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        loss = self._impl.backward(closure_loss, optimizer, *args, **kwargs)
        return super().backward(closure_loss, optimizer, *args, **kwargs) if loss is None else loss

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        super().post_backward(closure_loss)
        self._impl.post_backward()

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        self._impl.before_training_step()
        return super().training_step(*args, **kwargs)

    def _step_runner(self, step_name: str) -> Any:
        # Validation, test and predict run on the bare module: no gradients to reduce, and ShardedDataParallel
        # would rebuild its hooks and buckets each time it sees the module switch between train and eval.
        if step_name == "training_step" or self._impl.model_is_sharded():
            return None  # Lightning's path; under fsdp2 the step methods are registered with FSDP to gather parameters
        assert self.lightning_module is not None
        return getattr(self.lightning_module, step_name)

    # ------------------------------------------------------------------ checkpoints
    def _saves_sharded(self) -> bool:
        return self._checkpoint_format == "sharded" and self._impl.holds_shards()

    @property
    @override
    def restore_checkpoint_after_setup(self) -> bool:
        # A sharded folder loads into the sharded model and its sharded optimizers, which setup() creates: each rank
        # reads only what it holds. (A full file loads the same either way.)
        return self._impl.writes_sharded_checkpoints

    @property
    @override
    def lightning_restore_optimizer(self) -> bool:
        return not self._restored_in_place

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None) -> None:
        """One file from rank 0 (``"full"``), or with ``"sharded"`` a folder that every rank writes its shards into,
        swapped into place atomically by rank 0. Called on every rank (Lightning's ``save_checkpoint``)."""
        if not self._saves_sharded():
            super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)
            return
        if storage_options is not None:
            raise TypeError(
                f"ShardedStrategy(checkpoint_format='sharded') saves take no storage_options, got {storage_options!r}."
            )
        # Rank 0's path and one temporary folder beside it for all ranks: the shards of this save must land together
        # (a caller may pass each rank its own path, as Ray's report callback does with per-rank temporary folders).
        # Across nodes this needs a filesystem they share, as Lightning's FSDP sharded checkpoints do.
        # The previous background save must land first: this one's start removes stale temporary folders.
        self.wait_for_checkpoint()
        filepath = self.broadcast(str(filepath))
        tmp = Path(self.broadcast(str(temporary_folder(filepath))))
        group = self._checkpoint_group() if self._async_save and self._fitting() else None
        self._pending_save = write_sharded_checkpoint(
            checkpoint, filepath, tmp, coordinator=self.is_global_zero, async_group=group
        )

    def wait_for_checkpoint(self) -> None:
        """Block until the last background save (``async_save=True``) has landed; raise its error if it failed."""
        pending, self._pending_save = self._pending_save, None
        if pending is not None:
            pending.result()

    def _checkpoint_group(self) -> Any:
        """A gloo group for the background saves' collectives, apart from training's (made on the first save, a
        collective: every rank saves)."""
        if self._async_group is None:
            import atexit

            import torch.distributed as dist

            self._async_group = dist.new_group(backend="gloo")
            rank_zero_info(
                "strategy='sharded': checkpoints are written in the background (async_save); each lands when its last rank is done."
            )
            # Registered after destroy_at_exit's hook, so it runs first: the save's collectives need the groups.
            atexit.register(self.wait_for_checkpoint)
        return self._async_group

    @override
    def load_checkpoint(self, checkpoint_path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """A sharded folder goes straight into the sharded model and optimizers (each rank reads what overlaps its
        shards, so any number of ranks can load it); anything else is read whole through the checkpoint IO."""
        self._restored_in_place = False
        path = Path(checkpoint_path)
        if not (self._impl.holds_shards() and is_sharded_checkpoint(path)):
            return super().load_checkpoint(checkpoint_path, *args, **kwargs)
        self._impl.load_sharded_checkpoint(path)
        self._restored_in_place = True
        return load_checkpoint_file(path / META_FILENAME, trusted=kwargs.get("weights_only") is False)

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The full, unsharded optimizer state on rank 0 and ``{}`` elsewhere (``"sharded"``: this rank's shards, on
        every rank).

        Consolidation is a collective: every rank must call this (Lightning's ``dump_checkpoint`` does, on
        every rank); only rank 0 then writes the checkpoint.
        """
        return self._impl.optimizer_state(unwrap_optimizer(optimizer), sharded=self._saves_sharded())

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Load the ordinary (unsharded) optimizer states; each rank keeps only its shard."""
        if self._restored_in_place:  # a sharded folder: load_checkpoint has loaded them
            return
        for optimizer, opt_state in zip(self.optimizers, checkpoint["optimizer_states"]):
            self._impl.load_optimizer_state(unwrap_optimizer(optimizer), opt_state)

    @override
    def lightning_module_state_dict(self) -> dict[str, Any]:
        """Plain keys; under fsdp2 the whole model gathered to rank 0 (a collective; ``{}`` on other ranks), or with
        ``"sharded"`` this rank's shards (DTensors)."""
        state = self._impl.model_state(sharded=self._saves_sharded())
        return super().lightning_module_state_dict() if state is None else state

    def handoff_state_dict(self) -> dict[str, Any]:
        """The weights a spawn launcher hands to the launching process after ``fit``: whole plain tensors (rank 0;
        a collective under fsdp2), never DTensors, which the launching process has no process group for."""
        return self._impl.handoff_state()

    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        if self._restored_in_place:  # a sharded folder: load_checkpoint has loaded the model
            return
        if not self._impl.load_model_state(dict(checkpoint["state_dict"]), strict=strict):
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
        self._failed = not isinstance(exception, (KeyboardInterrupt, SystemExit))  # Ctrl-C: every rank stops alike
        # Keep the group (other ranks may be inside a collective); under the script launcher, name a dead rank
        # (not after Ctrl-C, where every rank stops on purpose).
        on_training_failure(self, report=not isinstance(exception, KeyboardInterrupt))

    @override
    def teardown(self) -> None:
        if self._failed:
            # Another rank may never finish its part of a background save: do not wait for it. Its temporary folder
            # is removed by the next save, and the previous checkpoint stays in place.
            self._pending_save = None
        self.wait_for_checkpoint()  # the end of fit: the last checkpoint is in place when fit returns
        self._impl.teardown()
        super().teardown()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> list[str]:
        presets = {
            cls.strategy_name: (
                "popen",
                "Sharded data parallel (FairScale OSS + ShardedDataParallel, ZeRO-2), launched like ddp",
                {},
            ),
            "sharded_spawn": (
                "spawn",
                "Sharded data parallel (FairScale OSS + ShardedDataParallel, ZeRO-2), launched like ddp_spawn",
                {},
            ),
            "ddp_sharded": ("popen", "Alias of `sharded` (the Lightning 1.x name)", {}),
            "ddp_sharded_spawn": ("spawn", "Alias of `sharded_spawn` (the Lightning 1.x name)", {}),
            # Lightning 1.9's explicit spellings (its tests checked that they set find_unused_parameters=False).
            "ddp_sharded_find_unused_parameters_false": (
                "popen",
                "`sharded` with find_unused_parameters=False (Lightning 1.x name)",
                {"find_unused_parameters": False},
            ),
            "ddp_sharded_spawn_find_unused_parameters_false": (
                "spawn",
                "`sharded_spawn` with find_unused_parameters=False (Lightning 1.x name)",
                {"find_unused_parameters": False},
            ),
            # Lightning 2.x's pattern (`ddp_find_unused_parameters_true`) for the opt-in.
            "sharded_find_unused_parameters_true": (
                "popen",
                "`sharded` with find_unused_parameters=True",
                {"find_unused_parameters": True},
            ),
            "sharded_spawn_find_unused_parameters_true": (
                "spawn",
                "`sharded_spawn` with find_unused_parameters=True",
                {"find_unused_parameters": True},
            ),
            # torch FSDP2 (maintained; no FairScale needed): ZeRO-2 by default.
            "sharded_fsdp2": (
                "popen",
                "Sharded data parallel on torch FSDP2 (fully_shard, ZeRO-2), launched like ddp",
                {"backend": "fsdp2"},
            ),
            "sharded_fsdp2_spawn": (
                "spawn",
                "Sharded data parallel on torch FSDP2 (fully_shard, ZeRO-2), launched like ddp_spawn",
                {"backend": "fsdp2"},
            ),
        }
        for name, (start_method, description, extra) in presets.items():
            strategy_registry.register(name, cls, description=description, start_method=start_method, **extra)
        return list(presets)
