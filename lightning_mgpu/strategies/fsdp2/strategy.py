"""``sharded_fsdp2``: torch's ``fully_shard`` (FSDP2) on Lightning 2.x, with checkpoints every strategy can load.

Parameters, gradients and optimizer state are all sharded (ZeRO-2 by default, ZeRO-3 with
``reshard_after_forward=True``); the optimizer stays the user's own, built on the DTensor shards. No FairScale.

Names registered with Lightning::

    Trainer(strategy="sharded_fsdp2")        # launched like "ddp"
    Trainer(strategy="sharded_fsdp2_spawn")  # launched like "ddp_spawn"
    Trainer(strategy="sharded_fsdp2_notebook")  # launched like "ddp_notebook" (forks: notebooks)

Lightning's own ``fsdp`` strategy is FSDP1 and writes its own checkpoint layout. This one writes the bundle's layout
(plain model keys, torch's ordinary optimizer state), in a folder of shards by default, which loads under ``ddp``,
``dp``, the other sharded strategies and any number of ranks.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.utilities.init import _has_meta_device_parameters_or_buffers, _materialize_distributed_module
from lightning.pytorch.overrides.distributed import _sync_module_states
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import nn
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.plugins.precision.fsdp2 import fsdp2_precision
from lightning_mgpu.strategies._sharded_base import CheckpointFormat, ShardedBase, StartMethod
from lightning_mgpu.strategies.fsdp2 import state
from lightning_mgpu.strategies.fsdp2.sharding import DEFAULT_MIN_PARAMS, apply_fully_shard, is_fully_sharded, no_sync
from lightning_mgpu.utilities.modules import ModuleSpec, as_spec_list
from lightning_mgpu.utilities.optimizers import unwrap_optimizer

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["FSDP2Strategy"]


class FSDP2Strategy(ShardedBase):
    """Fully sharded data parallelism on torch's ``fully_shard``: each chosen block, then the root.

    Args:
        accelerator, parallel_devices, cluster_environment, checkpoint_io, precision_plugin: as for
            Lightning's ``DDPStrategy``; the Trainer normally fills them in.
        reshard_after_forward: ``False`` (default, ZeRO-2) keeps each block's gathered parameters from its forward to
            its backward; ``True`` (ZeRO-3) frees them after forward and gathers them again in backward.
        fsdp_modules: the blocks that get their own ``fully_shard``, as ``ActivationCheckpointing`` chooses modules:
            classes, qualified-name patterns (``"net.blocks.*"``) or predicates. ``None``: chosen by size, with
            ``min_params``. Whole blocks (a transformer layer) overlap communication best.
        min_params: with ``fsdp_modules=None``, a module gets a group of its own once it holds this many parameters
            that no group below it took; smaller ones (a BatchNorm, a bias) join their parent's group. Each group costs
            host time every step, whatever its size. ``0``: every module holding parameters gets a group.
        mp_policy: ``torch.distributed.fsdp.MixedPrecisionPolicy(param_dtype=..., reduce_dtype=...)``: parameters
            gathered and computed in ``param_dtype`` (the shards and the optimizer stay fp32), gradients reduced in
            ``reduce_dtype``. Use it instead of ``precision="bf16-mixed"``, not with it.
        offload_policy: ``torch.distributed.fsdp.CPUOffloadPolicy()``: shards, gradients and optimizer state live in
            CPU memory and the optimizer step runs there; each block is copied to the GPU to run. GPU only.
        checkpoint_format: ``"sharded"`` (the default): every rank writes its shards into a folder named like the
            checkpoint file, and nothing is gathered; ``"full"``: one file, gathered to rank 0.
        async_save: with ``"sharded"``, saves made while fitting return once the shards are copied to CPU memory and
            each rank writes them in a background thread (``torch.distributed.checkpoint.async_save``); costs one copy
            of the rank's shards in CPU memory while a save is in flight.
        process_group_backend, timeout, start_method: as for ``DDPStrategy``.

    Raises:
        ValueError: an unknown checkpoint format, ``async_save`` with ``"full"``, a negative ``min_params`` or one
            given with ``fsdp_modules``, or (at setup) ``fsdp_modules``
            matching nothing, or ``offload_policy`` on the CPU.
        UnsupportedTorchError: (at setup) the CPU, with a torch whose FSDP2 cannot run there.

    Example::

        import lightning.pytorch as pl
        import lightning_mgpu  # registers "sharded_fsdp2", "_spawn" and "_notebook"
        from lightning_mgpu.strategies import FSDP2Strategy

        trainer = pl.Trainer(strategy="sharded_fsdp2", accelerator="gpu", devices=4)
        trainer = pl.Trainer(strategy=FSDP2Strategy(fsdp_modules=[nn.TransformerEncoderLayer]), devices=4)
    """

    strategy_name = "sharded_fsdp2"
    notebook_name = "sharded_fsdp2_notebook"
    shards_gradients = True
    default_checkpoint_format = "sharded"

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        reshard_after_forward: bool = False,
        fsdp_modules: Sequence[ModuleSpec] | None = None,
        min_params: int = DEFAULT_MIN_PARAMS,
        mp_policy: Any | None = None,
        offload_policy: Any | None = None,
        checkpoint_format: CheckpointFormat | None = None,
        async_save: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: StartMethod = "popen",
    ) -> None:
        self.reshard_after_forward = bool(reshard_after_forward)
        self.fsdp_modules = None if fsdp_modules is None else as_spec_list(fsdp_modules)
        if not isinstance(min_params, int) or isinstance(min_params, bool) or min_params < 0:
            raise ValueError(
                f"FSDP2Strategy(min_params={min_params!r}): pass a whole number of parameters >= 0 (0 gives every"
                f" module holding parameters a group of its own; the default is {DEFAULT_MIN_PARAMS:,})."
            )
        if fsdp_modules is not None and min_params != DEFAULT_MIN_PARAMS:
            raise ValueError(
                "FSDP2Strategy(fsdp_modules=..., min_params=...): min_params chooses the groups only when fsdp_modules"
                " is None. Pass one of them."
            )
        self.min_params = min_params
        self.mp_policy = mp_policy
        self.offload_policy = offload_policy
        # A full checkpoint's model state that arrived before setup, for a model built on the meta device: loaded
        # into the shards once fully_shard has materialised them. (state dict, strict)
        self._held_back_state: tuple[dict[str, Any], bool] | None = None
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
            checkpoint_format=checkpoint_format,
            async_save=async_save,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
        )

    @override
    def _shard_aware(self, plugin: Precision) -> Precision:
        return fsdp2_precision(plugin)

    def _module(self) -> nn.Module:
        module = self.lightning_module
        assert module is not None
        return module

    # ------------------------------------------------------------------ setup
    @override
    def check_before_launch(self, trainer: pl.Trainer) -> None:
        """The sharded engines' refusals before a spawn launch, and SWA and EMA, which cannot average what FSDP2
        shards.

        Raises:
            MisconfigurationException: BatchSizeFinder, or SWA or EMA on a model this strategy shards.
        """
        super().check_before_launch(trainer)
        if trainer.state.fn == TrainerFn.FITTING:
            _refuse_weight_averaging(trainer)

    @override
    def _setup_fit(self, trainer: pl.Trainer) -> None:
        _refuse_weight_averaging(trainer)
        # The optimizers must be built on the sharded (DTensor) parameters: fully_shard first.
        self._fully_shard()
        if self._held_back_state is not None:
            held, strict = self._held_back_state
            self._held_back_state = None
            state.load_full_model_state(self._module(), held, strict=strict)
        self.setup_optimizers(trainer)

    def _fully_shard(self) -> None:
        model = self.model
        assert model is not None
        on_meta = _has_meta_device_parameters_or_buffers(model)
        if not on_meta:
            # fully_shard keeps each rank's own slice of the weights it is given: start from rank 0's, as DDP does.
            _sync_module_states(model)
        blocks = apply_fully_shard(
            model,
            self.world_size,
            self.root_device.type,
            self.reshard_after_forward,
            self.fsdp_modules,
            mp_policy=self.mp_policy,
            offload_policy=self.offload_policy,
            min_params=self.min_params,
        )
        if on_meta:
            # Built in configure_model on the meta device: each rank allocates its shards only, then reset_parameters()
            # initialises them (DTensor-aware, so the ranks draw one consistent tensor). The whole model never exists.
            _materialize_distributed_module(model, self.root_device)
        reshard = self.reshard_after_forward
        rank_zero_info(
            f"strategy='sharded_fsdp2': {len(blocks)} block(s) and the root sharded over {self.world_size} rank(s),"
            f" reshard_after_forward={reshard} ({'ZeRO-3' if reshard else 'ZeRO-2'})"
            + (", built on the meta device and materialised shard by shard." if on_meta else ".")
        )

    @override
    def _model_is_sharded(self) -> bool:
        model = self.model
        return model is not None and is_fully_sharded(model)

    @override
    def _holds_shards(self) -> bool:
        return self._model_is_sharded()

    @contextmanager
    @override
    def model_sharded_context(self) -> Generator[None, None, None]:
        """Where ``configure_model`` builds the layers: while fitting, on the meta device (no memory), and ``setup``
        materialises only each rank's shards after ``fully_shard``. Validate/test/predict build them as usual."""
        context: AbstractContextManager = torch.device("meta") if self._fitting() else nullcontext()
        with context:
            yield

    # ------------------------------------------------------------------ training
    @contextmanager
    @override
    def block_backward_sync(self) -> Generator:
        """Accumulate locally: no reduce-scatter inside the context (non-final micro-batches)."""
        model = self.model
        with no_sync(model) if model is not None and is_fully_sharded(model) else super().block_backward_sync():
            yield None

    # ------------------------------------------------------------------ checkpoints
    @override
    def lightning_module_state_dict(self) -> dict[str, Any]:
        """Plain keys: the whole model gathered to rank 0 (a collective; ``{}`` on other ranks), or with ``"sharded"``
        this rank's shards (DTensors)."""
        if not self._model_is_sharded():
            return super().lightning_module_state_dict()
        if self._saves_sharded():
            return state.sharded_model_state(self._module())
        return state.full_model_state(self._module())

    @override
    def _optimizer_state(self, optimizer: Optimizer, sharded: bool) -> dict[str, Any]:
        if not self._model_is_sharded():
            return optimizer.state_dict()
        if sharded:
            return state.sharded_optimizer_state(self._module(), optimizer)
        full = state.full_optimizer_state(self._module(), optimizer)  # a collective
        return full if self.is_global_zero else {}

    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        if not (self._restored_in_place or self._model_is_sharded()) and _has_meta_device_parameters_or_buffers(
            self._module()
        ):
            # Lightning restores a fit's checkpoint before setup (as under ddp); this model was built on the meta
            # device, where a load is lost: _setup_fit loads it once fully_shard has materialised the shards.
            self._held_back_state = (dict(checkpoint["state_dict"]), strict)
            return
        if self._restored_in_place or not self._model_is_sharded():
            super().load_model_state_dict(checkpoint, strict=strict)
            return
        # Loaded after fully_shard (a full file, or a callback): scatter the whole state.
        state.load_full_model_state(self._module(), dict(checkpoint["state_dict"]), strict=strict)

    @override
    def _load_optimizer_state(self, optimizer: Optimizer, saved: dict[str, Any]) -> None:
        if not self._model_is_sharded():
            super()._load_optimizer_state(optimizer, saved)
            return
        state.load_full_optimizer_state(self._module(), optimizer, saved)

    @override
    def _load_sharded_folder(self, path: Path) -> None:
        state.load_sharded_checkpoint(self._module(), [unwrap_optimizer(o) for o in self.optimizers], path)

    @override
    def teardown(self) -> None:
        self._held_back_state = None  # a fit that failed before setup must not hand its checkpoint to the next one
        super().teardown()

    @override
    def handoff_state_dict(self) -> dict[str, Any]:
        """Whole plain tensors for the launching process (a collective; rank 0's are the ones handed over)."""
        if self._model_is_sharded():
            return state.full_model_state(self._module())
        return super().handoff_state_dict()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        description = "Sharded data parallel on torch FSDP2 (fully_shard, ZeRO-2)"
        cls._register_pair(
            strategy_registry, cls.strategy_name, "sharded_fsdp2_spawn", description, notebook_name=cls.notebook_name
        )


def _refuse_weight_averaging(trainer: pl.Trainer) -> None:
    """Lightning's SWA and EMA refuse sharded models by checking for its own FSDP and DeepSpeed classes, which this is
    not: without this they fail after the first epoch, inside torch's ``AveragedModel`` ("got mixed torch.Tensor and
    DTensor"). Refused before anything is sharded, in one line."""
    from lightning.pytorch.callbacks import StochasticWeightAveraging

    try:
        from lightning.pytorch.callbacks import WeightAveraging  # Lightning 2.6 (EMA)
    except ImportError:  # Lightning 2.5
        WeightAveraging = StochasticWeightAveraging  # type: ignore[misc,assignment]  # noqa: N806
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, (StochasticWeightAveraging, WeightAveraging)):
            raise MisconfigurationException(
                f"{type(callback).__name__} cannot average a model that strategy='sharded_fsdp2' shards (its parameters"
                " are DTensor shards, which torch's AveragedModel cannot copy): use strategy='sharded_zero' or"
                " 'sharded' (whole parameters on every rank, optimizer state sharded), or 'ddp'."
            )
