"""What the three sharded engines share: checkpoint formats, background saves, the spawn launcher, failure handling.

:class:`ShardedBase` is a Lightning ``DDPStrategy``. Each engine is a subclass of its own, with its own options and
precision plugins: :class:`~lightning_mgpu.strategies.sharded.ShardedStrategy` (FairScale, ZeRO-2),
:class:`~lightning_mgpu.strategies.sharded.ZeroStrategy` (torch's ``ZeroRedundancyOptimizer``, ZeRO-1) and
:class:`~lightning_mgpu.strategies.fsdp2.FSDP2Strategy` (torch's ``fully_shard``). An engine overrides Lightning's
methods where it differs, and the few hooks below (``_setup_fit``, ``_holds_shards``, ...) where the shared checkpoint
logic needs to ask it something.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.utilities.init import _has_meta_device_parameters_or_buffers
from lightning.fabric.utilities.optimizer import _optimizer_to_device, _optimizers_to_device
from lightning.pytorch.overrides.distributed import _sync_module_states
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.checkpoint.io import AtomicCheckpointIO, load_checkpoint_file
from lightning_mgpu.checkpoint.sharded import (
    META_FILENAME,
    BackgroundSaves,
    is_sharded_checkpoint,
    temporary_folder,
    write_sharded_checkpoint,
)
from lightning_mgpu.security.trust import check_untrusted_load
from lightning_mgpu.strategies._spawn import CleanExitSpawnLauncher
from lightning_mgpu.strategies._steps import StepRouting
from lightning_mgpu.utilities.failures import on_training_failure
from lightning_mgpu.utilities.optimizers import unwrap_optimizer
from lightning_mgpu.utilities.ports import release_for_spawn
from lightning_mgpu.utilities.process_group import destroy_at_exit

if TYPE_CHECKING:
    import lightning.pytorch as pl

CheckpointFormat = Literal["sharded", "full"]
StartMethod = Literal["popen", "spawn", "fork", "forkserver"]
_FORMATS = ("sharded", "full")

__all__ = ["CheckpointFormat", "ShardedBase", "StartMethod"]


class ShardedBase(StepRouting, DDPStrategy):
    """The part of a sharded strategy that does not depend on the engine (see the subclasses for a manual).

    Args:
        accelerator, parallel_devices, cluster_environment, checkpoint_io, precision_plugin: as for Lightning's
            ``DDPStrategy``; the Trainer normally fills them in.
        checkpoint_format: ``"sharded"``: every rank writes its own part into a folder named like the checkpoint
            file (nothing is gathered; it loads on any number of ranks, and under other strategies through
            ``AtomicCheckpointIO``); ``"full"``: one file, consolidated on rank 0. ``None``: the engine's default.
        async_save: with ``checkpoint_format="sharded"``, saves made while fitting return once the shards are copied to
            CPU memory, and each rank writes them in a background thread over a gloo group of its own; the folder lands
            atomically when the last rank is done. The next save, the end of ``fit`` and the interpreter's exit wait
            for it (:meth:`wait_for_checkpoint`).
        process_group_backend, timeout, start_method: as for ``DDPStrategy``.
        **ddp_kwargs: passed to ``DDPStrategy`` (and through it to ``DistributedDataParallel``, where the engine
            uses it).

    Raises:
        ValueError: an unknown checkpoint format, or ``async_save`` without ``checkpoint_format="sharded"``.
    """

    strategy_name: ClassVar[str]
    #: the name launched like ``ddp_notebook`` (forks the notebook's process), named when a notebook asks for another
    notebook_name: ClassVar[str]
    #: each rank holds only its shard of the reduced gradients: clipping and loss scaling must agree across ranks
    shards_gradients: ClassVar[bool] = False
    #: the checkpoint format when the user names none
    default_checkpoint_format: ClassVar[CheckpointFormat] = "full"

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        checkpoint_format: CheckpointFormat | None = None,
        async_save: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: StartMethod = "popen",
        **ddp_kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        if checkpoint_format not in (None, *_FORMATS):
            raise ValueError(
                f"{owner}(checkpoint_format={checkpoint_format!r}) is not supported; choose one of {_FORMATS}."
            )
        self._checkpoint_format: CheckpointFormat = checkpoint_format or self.default_checkpoint_format
        if async_save and self._checkpoint_format != "sharded":
            raise ValueError(
                f"{owner}(async_save=True) writes sharded folders in the background; pass checkpoint_format='sharded'"
                " with it (a full checkpoint is gathered to rank 0 first: use Lightning's AsyncCheckpointIO plugin for"
                " files)."
            )
        self._async_save = async_save
        self._background = BackgroundSaves()
        self._failed = False
        # Set by load_checkpoint when a sharded folder went (or, held back, goes) straight into the sharded model and
        # optimizers.
        self._restored_in_place = False
        # A sharded folder that load_checkpoint read before setup: setup() loads it once the wrapper and the sharded
        # optimizers exist. (folder, the keyword arguments of load_checkpoint)
        self._held_back_folder: tuple[Path, dict[str, Any]] | None = None
        # Between setup() and teardown() of one run: load_checkpoint tells Lightning's early restore (before setup,
        # as under ddp) from a later one.
        self._is_set_up = False
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
            **ddp_kwargs,
        )

    @classmethod
    def _register_pair(
        cls,
        registry: Any,
        name: str,
        spawn_name: str,
        description: str,
        notebook_name: str | None = None,
        **init_params: Any,
    ) -> None:
        """Register ``name``, launched like ``ddp``, ``spawn_name``, launched like ``ddp_spawn``, and
        ``notebook_name`` (where given), launched like ``ddp_notebook``: it forks the notebook's process, so a model
        defined in a cell reaches the workers without being pickled."""
        variants = [(name, "popen", "ddp"), (spawn_name, "spawn", "ddp_spawn")]
        if notebook_name is not None:
            variants.append((notebook_name, "fork", "ddp_notebook"))
        for key, start_method, like in variants:
            registry.register(
                key, cls, f"{description}, launched like {like}", start_method=start_method, **init_params
            )

    @property
    def checkpoint_format(self) -> CheckpointFormat:
        """``"sharded"`` (a folder of per-rank shards) or ``"full"`` (one file consolidated on rank 0)."""
        return self._checkpoint_format

    def check_before_launch(self, trainer: pl.Trainer) -> None:
        """Refusals of the fit's set-up that the ``*_spawn`` launcher makes before it starts any worker, in one line
        (in a worker they come back wrapped in its traceback). Lightning's own guard of ``BatchSizeFinder`` (every rank
        would search alone) is one: it runs in the workers' set-up.

        Raises:
            MisconfigurationException: a feature this strategy cannot run.
        """
        from lightning.pytorch.callbacks import BatchSizeFinder

        callbacks = trainer.callbacks  # type: ignore[attr-defined]
        if trainer.state.fn == TrainerFn.FITTING and any(isinstance(c, BatchSizeFinder) for c in callbacks):
            raise MisconfigurationException("The Batch size finder is not supported with distributed strategies.")

    # ------------------------------------------------------------------ what an engine answers
    def _setup_fit(self, trainer: pl.Trainer) -> None:
        """Wrap the model and build the (sharded) optimizers, in the order the engine needs."""
        raise NotImplementedError

    def _model_is_sharded(self) -> bool:
        """Whether the model's parameters are sharded now (not only its optimizer state)."""
        return False

    def _holds_shards(self) -> bool:
        """Whether this rank now holds state only it has (a sharded folder is then written and read in place)."""
        return False

    def _shard_aware(self, plugin: Precision) -> Precision:
        """The precision plugin this engine trains with, built from the one the Trainer chose."""
        return plugin

    def _optimizer_state(self, optimizer: Optimizer, sharded: bool) -> dict[str, Any]:
        """The optimizer state to save: the whole one on rank 0 (``{}`` elsewhere), or this rank's shards."""
        return optimizer.state_dict()

    def _load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        """Load a whole (unsharded) optimizer state; each rank keeps what it owns."""
        optimizer.load_state_dict(state)
        _optimizer_to_device(optimizer, self.root_device)

    def _load_sharded_folder(self, path: Path) -> None:
        """Load a sharded folder straight into the sharded model and optimizers."""
        raise NotImplementedError

    # ------------------------------------------------------------------ launch
    @override
    def _configure_launcher(self) -> None:
        from lightning.fabric.utilities import imports

        # Lightning refuses a launcher that runs the script again or pickles the model in a notebook too, but its
        # message names only its own ddp_notebook: name this engine's forking variant instead.
        if imports._IS_INTERACTIVE and self._start_method != "fork":
            raise MisconfigurationException(
                f"{type(self).__name__}(start_method={self._start_method!r}) cannot start its processes from a notebook"
                f" or an interactive session: use strategy={self.notebook_name!r}, which forks this process as"
                " Lightning's 'ddp_notebook' does, or strategy='dp'; or run the code as a script."
            )
        if self._start_method == "popen":
            super()._configure_launcher()
            return
        assert self.cluster_environment is not None
        # A notebook's earlier in-process fit holds MASTER_PORT: the workers about to be spawned need a free one.
        release_for_spawn(self.cluster_environment, self.num_nodes)
        self._launcher = CleanExitSpawnLauncher(self, start_method=self._start_method)

    # ------------------------------------------------------------------ precision
    @property
    @override
    def precision_plugin(self) -> Precision:
        if self._precision_plugin is None:
            self._precision_plugin = self._shard_aware(Precision())
        return self._precision_plugin

    @precision_plugin.setter
    @override
    def precision_plugin(self, precision_plugin: Precision | None) -> None:
        self._precision_plugin = None if precision_plugin is None else self._shard_aware(precision_plugin)

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
            if self.world_size == 1:
                rank_zero_info(
                    f"strategy={self.strategy_name!r} on a single process: there is nothing to shard, the one rank"
                    " holds the whole optimizer state. Training runs normally; use devices > 1 (or several nodes) to"
                    " save memory."
                )
            self._setup_fit(trainer)
        elif not self._model_is_sharded():
            # Validation, test and predict run on the bare module; only the states need to agree.
            _sync_module_states(self.model)
        self.setup_precision_plugin()
        if fitting:
            _optimizers_to_device(self.optimizers, self.root_device)
        self._is_set_up = True
        if self._held_back_folder is not None:
            # The module's and the callbacks' load hooks have run (before configure_optimizers, as under ddp); the
            # shards go into the sharded model and optimizers that exist only now.
            self._load_held_back_folder()

    def _fitting(self) -> bool:
        trainer = getattr(self.lightning_module, "_trainer", None)
        return trainer is not None and trainer.state.fn == TrainerFn.FITTING

    @override
    def _step_runner(self, step_name: str) -> Any:
        # Validation, test and predict run on the bare module: no gradients to reduce, and a wrapper such as
        # ShardedDataParallel would rebuild its hooks and buckets each time it sees the module switch modes.
        if step_name == "training_step" or self._model_is_sharded():
            return None  # Lightning's path; under fsdp2 the step methods are registered with FSDP to gather parameters
        assert self.lightning_module is not None
        return getattr(self.lightning_module, step_name)

    # ------------------------------------------------------------------ checkpoints
    def _saves_sharded(self) -> bool:
        return self._checkpoint_format == "sharded" and self._holds_shards()

    @property
    @override
    def restore_checkpoint_after_setup(self) -> bool:
        # Lightning's contract, as under ddp: the LightningModule's and the callbacks' load hooks (on_load_checkpoint,
        # load_state_dict) run before setup() calls configure_optimizers, so a hook can change what it reads. What
        # needs the sharded wrapper and optimizers is held back until setup() has built them: a sharded folder
        # (load_checkpoint), FSDP2's model built on the meta device (its load_model_state_dict).
        return False

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
                f"{type(self).__name__}(checkpoint_format='sharded') saves take no storage_options, got"
                f" {storage_options!r}."
            )
        # Rank 0's path and one temporary folder beside it for all ranks: the shards of this save must land together
        # (a caller may pass each rank its own path, as Ray's report callback does with per-rank temporary folders).
        # Across nodes this needs a filesystem they share, as Lightning's FSDP sharded checkpoints do.
        # The previous background save must land first: this one's start removes stale temporary folders.
        self.wait_for_checkpoint()
        filepath = self.broadcast(str(filepath))
        tmp = Path(self.broadcast(str(temporary_folder(filepath))))
        if not (self._async_save and self._fitting()):
            write_sharded_checkpoint(checkpoint, filepath, tmp, coordinator=self.is_global_zero)
            return
        if self._background.group is None:
            rank_zero_info(
                f"strategy={self.strategy_name!r}: checkpoints are written in the background (async_save); each lands"
                " when its last rank is done."
            )
        self._background.start(checkpoint, filepath, tmp, coordinator=self.is_global_zero)

    def wait_for_checkpoint(self) -> None:
        """Block until the last background save (``async_save=True``) has landed; raise its error if it failed."""
        self._background.wait()

    @override
    def load_checkpoint(self, checkpoint_path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """A sharded folder goes straight into the sharded model and optimizers (each rank reads what overlaps its
        shards, so any number of ranks can load it); anything else is read whole through the checkpoint IO."""
        self._restored_in_place = False
        self._held_back_folder = None
        path = Path(checkpoint_path)
        sharded_folder = is_sharded_checkpoint(path)
        # Lightning restores a fit's checkpoint before setup() (restore_checkpoint_after_setup is False): the sharded
        # model and optimizers that the folder loads into do not exist yet (nor can a sharded optimizer left by an
        # earlier fit be trusted), so setup() loads the shards; the hooks get the rest (meta.pt) now.
        hold_back = sharded_folder and self._fitting() and not self._is_set_up
        if not (hold_back or (sharded_folder and self._holds_shards())):
            return self._adopt_legacy_precision_state(super().load_checkpoint(checkpoint_path, *args, **kwargs))
        # As the checkpoint IO decides for a file: weights_only=False asks for a full unpickle, so does its `trusted`.
        trusted = kwargs.get("weights_only") is False or getattr(self.checkpoint_io, "trusted", False)
        check_untrusted_load(path, trusted)
        if hold_back:
            self._held_back_folder = (path, dict(kwargs))
        else:
            self._load_sharded_folder(path)
        # Lightning's load_model_state_dict and load_optimizer_state_dict skip what the folder loads in place.
        self._restored_in_place = True
        meta = load_checkpoint_file(path / META_FILENAME, trusted=trusted)
        return self._adopt_legacy_precision_state(meta)

    def _load_held_back_folder(self) -> None:
        """Load the sharded folder that ``load_checkpoint`` read before setup: in place where this rank holds shards
        now, else whole (nothing was sharded, e.g. no optimizer to shard) as a full file would load."""
        assert self._held_back_folder is not None
        path, kwargs = self._held_back_folder
        self._held_back_folder = None
        if self._holds_shards():
            self._load_sharded_folder(path)
            return
        module = self.lightning_module
        assert module is not None
        checkpoint = super().load_checkpoint(path, **kwargs)  # the checkpoint IO reads a folder whole
        self._restored_in_place = False
        self.load_model_state_dict(checkpoint, strict=module.strict_loading)
        self.load_optimizer_state_dict(checkpoint)
        # Lightning's copy of the checkpoint is meta.pt, without the optimizer states: it must not load them.
        self._restored_in_place = True

    def _adopt_legacy_precision_state(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """File the precision plugin's state of an older checkpoint under this plugin's name.

        Lightning restores the plugin's state (the 16-mixed grad scaler's scale and growth tracker) only from the key
        named by the plugin's class. Until 889f4d2 every sharded engine's plugin was ``Sharded<Kind>Precision``; ZeRO
        now runs Lightning's own plugins and FSDP2 its ``FSDP2<Kind>Precision``, so their older checkpoints would resume
        with a fresh scaler, silently. Remove when checkpoints written before 2026-11-28 need not resume.
        """
        name = type(self.precision_plugin).__qualname__
        kind = name.removeprefix("FSDP2").removeprefix("Sharded")  # MixedPrecision, Precision, ...
        legacy = f"Sharded{kind}"
        if name not in checkpoint and legacy != name and legacy in checkpoint:
            checkpoint[name] = checkpoint[legacy]
        return checkpoint

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The full, unsharded optimizer state on rank 0 and ``{}`` elsewhere (``"sharded"``: this rank's shards, on
        every rank).

        Consolidation is a collective: every rank must call this (Lightning's ``dump_checkpoint`` does, on every
        rank); only rank 0 then writes the checkpoint.
        """
        return self._optimizer_state(unwrap_optimizer(optimizer), sharded=self._saves_sharded())

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Load the ordinary (unsharded) optimizer states; each rank keeps only its shard."""
        if self._restored_in_place:  # a sharded folder: load_checkpoint has loaded them
            return
        for optimizer, opt_state in zip(self.optimizers, checkpoint["optimizer_states"]):
            self._load_optimizer_state(unwrap_optimizer(optimizer), opt_state)

    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        if self._restored_in_place:  # a sharded folder: load_checkpoint has loaded the model
            return
        super().load_model_state_dict(checkpoint, strict=strict)

    def handoff_state_dict(self) -> dict[str, Any]:
        """The weights a spawn launcher hands to the launching process after ``fit``: whole plain tensors (rank 0),
        never DTensors, which the launching process has no process group for."""
        assert self.lightning_module is not None
        return self.lightning_module.state_dict()

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
            self._background.abandon()  # another rank may never finish its part of a background save
        self.wait_for_checkpoint()  # the end of fit: the last checkpoint is in place when fit returns
        self._is_set_up = False
        self._held_back_folder = None
        super().teardown()
