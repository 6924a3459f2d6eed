"""``sharded``: FairScale's sharded data parallelism (ZeRO-2) on Lightning 2.x, as Lightning 1.x's ``ddp_sharded``.

Lightning 2.0 removed ``ddp_sharded`` and ``ddp_sharded_spawn``. :class:`ShardedStrategy` brings them back: each
optimizer becomes ``fairscale.optim.OSS`` and the module is wrapped in ``ShardedDataParallel``, which reduces every
gradient only to the rank that owns it. Each rank keeps only its shard of the optimizer state and of the reduced
gradients, so a model whose Adam state does not fit with plain DDP can fit. Names registered with Lightning::

    Trainer(strategy="sharded")            # launched like "ddp" (one script per rank)
    Trainer(strategy="sharded_spawn")      # launched like "ddp_spawn"
    Trainer(strategy="sharded_notebook")   # launched like "ddp_notebook" (forks: notebooks)
    Trainer(strategy="ddp_sharded")        # Lightning 1.x's names of the two
    Trainer(strategy="ddp_sharded_spawn")
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from contextlib import contextmanager
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.plugins import CheckpointIO, ClusterEnvironment
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import Tensor
from torch.optim import Optimizer
from typing_extensions import override

from lightning_mgpu.plugins.precision.fairscale import fairscale_precision
from lightning_mgpu.strategies._sharded_base import CheckpointFormat, StartMethod
from lightning_mgpu.strategies.sharded.base import OptimizerShardedBase
from lightning_mgpu.strategies.sharded.optim import ShardedOptimizerFactory
from lightning_mgpu.utilities.imports import install_hint as _install_hint
from lightning_mgpu.utilities.imports import require
from lightning_mgpu.utilities.optimizers import unwrap_optimizer

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["ShardedStrategy"]

# FairScale's bucket for small gradients, used by default across nodes (Lightning 1.x's choice: 8M elements).
_MULTI_NODE_REDUCE_BUFFER_SIZE = 2**23


def _fairscale() -> ModuleType:
    """``sharded/fairscale.py``, which imports FairScale (only once the constructor has required it)."""
    from lightning_mgpu.strategies.sharded import fairscale

    return fairscale


class ShardedStrategy(OptimizerShardedBase):
    """Sharded data parallelism on FairScale: OSS shards the optimizer state, ShardedDataParallel the gradients.

    Checkpoints hold plain model keys and torch's ordinary optimizer state, so they load under ``ddp``, ``dp``,
    ``horovod``, into a plain ``nn.Module``, and under any sharded strategy on any number of ranks.

    Args:
        accelerator, parallel_devices, cluster_environment, checkpoint_io, precision_plugin: as for
            Lightning's ``DDPStrategy``; the Trainer normally fills them in.
        reduce_buffer_size: elements in the bucket that batches small gradient reductions; ``None`` picks 0 on one
            node and ``2**23`` on several (bucketed gradients are not sharded).
        find_unused_parameters: allow parameters that receive no gradient on some rank. FairScale has no such
            option; the strategy then reduces all gradients after the backward pass, in a fixed order, counting a
            missing gradient as zero (DDP leaves ``None`` for a parameter no rank used). This gives up overlapping the
            reduction with the backward pass. Off by default, as in DDP.
        broadcast_fp16: broadcast the updated parameter shards in fp16. ``None`` turns it on for ``16-mixed`` across
            several nodes.
        checkpoint_format: ``"full"`` (the default): one file, consolidated on rank 0; ``"sharded"``: a folder into
            which each rank writes its optimizer shard (and rank 0 the model, the same on every rank, once).
        async_save: with ``checkpoint_format="sharded"``, write the folder in the background (see
            :class:`~lightning_mgpu.strategies._sharded_base.ShardedBase`).
        process_group_backend, timeout, start_method: as for ``DDPStrategy``.
        **kwargs: passed to ``ShardedDataParallel`` (e.g. ``reduce_fp16``, ``auto_refresh_trainable``).

    Raises:
        MissingDependencyError: FairScale is not installed (the message names the extra).
        ValueError: a negative ``reduce_buffer_size``, a keyword ``ShardedDataParallel`` does not accept, an unknown
            checkpoint format, ``async_save`` with ``checkpoint_format="full"``, or ``backend=`` (the other engines are
            :class:`ZeroStrategy` and :class:`FSDP2Strategy`; the message names them).

    Example::

        import lightning.pytorch as pl
        import lightning_mgpu  # registers "sharded", "sharded_spawn", "ddp_sharded", "ddp_sharded_spawn"
        from lightning_mgpu.strategies import ShardedStrategy

        trainer = pl.Trainer(strategy="sharded", accelerator="gpu", devices=4, precision="16-mixed")
        trainer = pl.Trainer(strategy=ShardedStrategy(reduce_buffer_size=2**23), accelerator="gpu", devices=4)
    """

    strategy_name = "sharded"
    notebook_name = "sharded_notebook"
    shards_gradients = True
    # the optional package this engine needs (shown by `lightning-mgpu info`)
    optional_dependency: str | None = "fairscale"
    install_hint = _install_hint("fairscale")  # a capability (lightning_mgpu/utilities/capabilities.py)

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        reduce_buffer_size: int | None = None,
        find_unused_parameters: bool = False,
        broadcast_fp16: bool | None = None,
        checkpoint_format: CheckpointFormat | None = None,
        async_save: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
        start_method: StartMethod = "popen",
        **kwargs: Any,
    ) -> None:
        if "backend" in kwargs:  # the one-class spelling of an earlier release of the bundle
            raise ValueError(
                f"ShardedStrategy(backend={kwargs['backend']!r}) is gone: each engine is a class of its own. FairScale:"
                " ShardedStrategy(); torch ZeRO-1: ZeroStrategy() (strategy='sharded_zero'); FSDP2: FSDP2Strategy()"
                " (strategy='sharded_fsdp2')."
            )
        require("fairscale", "strategy='sharded'")
        if reduce_buffer_size is not None and reduce_buffer_size < 0:
            raise ValueError(
                f"ShardedStrategy(reduce_buffer_size={reduce_buffer_size}) must be >= 0 (0 disables bucketing)."
            )
        allowed = set(_fairscale().SDP_OPTIONS) - {"reduce_buffer_size"}
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise ValueError(
                f"ShardedStrategy got option(s) {unknown} that fairscale's ShardedDataParallel does not accept."
                f" Accepted: {sorted(allowed)}. For DDP's options use ZeroStrategy (strategy='sharded_zero')."
            )
        self._reduce_buffer_size = reduce_buffer_size
        self._find_unused_parameters = bool(find_unused_parameters)
        self._broadcast_fp16 = broadcast_fp16
        self._sdp_kwargs = dict(kwargs)
        # Whether on_after_backward is overridden (the LightningModule or a callback): set at each fit's setup.
        self._keep_gradients_for_hook = False
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

    @property
    def find_unused_parameters(self) -> bool:
        """Whether parameters that get no gradient on some rank are allowed (reduced as zeros, in a fixed order)."""
        return self._find_unused_parameters

    @property
    def sdp_kwargs(self) -> dict[str, Any]:
        """The keyword arguments passed on to ``ShardedDataParallel``."""
        return dict(self._sdp_kwargs)

    @override
    def _shard_aware(self, plugin: Precision) -> Precision:
        return fairscale_precision(plugin)

    # ------------------------------------------------------------------ setup
    @override
    def _optimizer_factory(self) -> ShardedOptimizerFactory:
        return _fairscale().make_oss(broadcast_fp16=self._resolved_broadcast_fp16())

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

    @override
    def _setup_fit(self, trainer: pl.Trainer) -> None:
        # OSS must exist before ShardedDataParallel, which reduces each gradient to its OSS owner.
        self.setup_optimizers(trainer)
        self._shard_optimizers()
        self._wrap_model()
        self._keep_gradients_for_hook = self._wrapper() is not None and self._hook_reads_gradients(trainer)

    def _hook_reads_gradients(self, trainer: pl.Trainer) -> bool:
        """Whether the LightningModule or a callback overrides ``on_after_backward`` (Lightning's contract: every
        gradient is there, reduced, in its parameter's dtype); says once what keeping them costs.

        FairScale's ShardedDataParallel (0.4.13, its last release) frees the gradients of the parameters another rank
        owns as its backward hooks reduce them, with no option to wait. Only a module or callback that looks at
        gradients pays for them: this goes when the FairScale engine does (the FSDP2 and ZeRO engines keep them).
        """
        callbacks = trainer.callbacks  # type: ignore[attr-defined]
        overriding = [type(o).__name__ for o in (self.lightning_module, *callbacks) if _overrides_after_backward(o)]
        if overriding:
            rank_zero_info(
                f"strategy='sharded': {', '.join(overriding)} overrides on_after_backward, so each backward keeps every"
                " gradient on every rank until that hook has run (all-reduced, as under ddp: the gradient memory of ddp"
                " for that moment, and the reduction runs after the backward instead of overlapping it); the gradients"
                " of the parameters other ranks own are released right after the hook."
            )
        return bool(overriding)

    def _wrap_model(self) -> None:
        """Wrap the model in ShardedDataParallel over the OSS optimizers (none: the model stays as it is)."""
        fairscale = _fairscale()
        oss = [opt for opt in self.optimizers if isinstance(opt, fairscale.OSS)]
        if not oss:
            return
        assert self.model is not None
        kwargs = {**self._sdp_kwargs, "reduce_buffer_size": self._resolved_reduce_buffer_size()}
        self.model = fairscale.wrap_module(self.model, oss, **kwargs)
        self._use_bucket_safe_zero_grad()

    def _wrapper(self) -> Any:
        """The ShardedDataParallel wrapper while fitting, else ``None``."""
        model = self.model
        if model is None or type(model).__name__ != "ShardedDataParallel":  # cheap test first: no import
            return None
        return model if isinstance(model, _fairscale().ShardedDataParallel) else None

    @property
    @override
    def optimizers(self) -> list[Optimizer]:
        return self._optimizers

    @optimizers.setter
    @override
    def optimizers(self, optimizers: list[Optimizer]) -> None:
        # The parent setter rebuilds the LightningOptimizer wrappers: point them at the bucket-safe zero_grad again.
        OptimizerShardedBase.optimizers.fset(self, optimizers)  # type: ignore[attr-defined]
        self._use_bucket_safe_zero_grad()

    def _use_bucket_safe_zero_grad(self) -> None:
        """Make ``self.optimizers().zero_grad()`` (manual optimization) the bucket-safe one of the OSS it wraps.

        LightningOptimizer subclasses the wrapped optimizer's class and forwards only missing attributes, so it finds
        OSS's class ``zero_grad`` before the instance attribute ``wrap_module`` installed on the OSS. That
        ``zero_grad`` frees the bucketed gradients and the ranks silently diverge (``reduce_buffer_size > 0``).
        """
        if self._wrapper() is None:
            return
        for lightning_optimizer in self._lightning_optimizers:
            zero_grad = _fairscale().bucket_safe_zero_grad(unwrap_optimizer(lightning_optimizer))
            if zero_grad is not None:
                lightning_optimizer.zero_grad = zero_grad  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ training
    @contextmanager
    @override
    def block_backward_sync(self) -> Generator:
        """Skip gradient reduction inside the context (non-final micro-batches of gradient accumulation).

        Lightning's automatic loop and ``LightningOptimizer.toggle_model(sync_grad=False)`` call this.
        """
        sdp = self._wrapper()
        with super().block_backward_sync() if sdp is None else sdp.no_sync():
            yield None

    @override
    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        sdp = self._wrapper()
        if sdp is None or not sdp.training:
            return super().backward(closure_loss, optimizer, *args, **kwargs)
        fairscale = _fairscale()
        # Each backward reduces what requires grad now: manual optimization may run several per forward, e.g. one
        # per optimizer of a GAN, with toggle_model() freezing the other optimizers' parameters.
        partial = fairscale.arm_reduction(sdp)
        keep = self._keep_gradients_for_hook
        if not (partial or self._find_unused_parameters or keep):
            # FairScale's hooks reduce each gradient as autograd finishes it, overlapping the backward.
            return super().backward(closure_loss, optimizer, *args, **kwargs)
        # Strategy.backward, with the reduction moved out of the autograd hooks, for two reasons. Ranks that use
        # different parameters finish their gradients in different orders, so reduce afterwards in a fixed order.
        # A partial backward must not reduce the buckets, which also hold the frozen gradients. And an overridden
        # on_after_backward must see every gradient, which FairScale's hooks would free on the ranks not owning it.
        module = self.lightning_module
        assert module is not None
        self.pre_backward(closure_loss)
        closure_loss = self.precision_plugin.pre_backward(closure_loss, module)
        accumulating = sdp._should_accumulate_grads
        with sdp.no_sync():
            self.precision_plugin.backward(closure_loss, module, optimizer, *args, **kwargs)
        others: list[Tensor] = []
        if not accumulating:
            others = fairscale.reduce_in_fixed_order(sdp, missing_as_zero=self._find_unused_parameters, every_rank=keep)
        closure_loss = self.precision_plugin.post_backward(closure_loss, module)  # runs on_after_backward
        # ZeRO-2 again: only the owner keeps a reduced gradient (for the optimizer step, clipping and the rest).
        fairscale.release_gradients(others)
        self.post_backward(closure_loss)
        return closure_loss

    @override
    def post_backward(self, closure_loss: Tensor) -> None:
        super().post_backward(closure_loss)
        sdp = self._wrapper()
        if sdp is None:
            return
        missing = _fairscale().params_not_reduced(sdp)
        if missing:
            # Fail now, on this rank: the other ranks wait in a reduce that this rank never issues, and this process
            # exiting is what releases them (instead of a hang until the collective timeout).
            raise RuntimeError(self._unused_parameters_message(missing))

    def _unused_parameters_message(self, missing: list[Tensor]) -> str:
        module = self.lightning_module
        assert module is not None
        names = {id(p): n for n, p in module.named_parameters()}
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
        sdp = self._wrapper()
        if sdp is not None:
            _fairscale().follow_module_mode(sdp)
        return super().training_step(*args, **kwargs)

    # ------------------------------------------------------------------ teardown
    @override
    def teardown(self) -> None:
        sdp = self._wrapper()
        if sdp is not None:
            # The reduce hooks would otherwise outlive the wrapper and issue collectives in a later backward.
            _fairscale().remove_grad_hooks(sdp)
            self.model = self.lightning_module
        self._keep_gradients_for_hook = False
        super().teardown()

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        register = functools.partial(cls._register_pair, strategy_registry)
        register(
            "sharded",
            "sharded_spawn",
            "Sharded data parallel (FairScale OSS + ShardedDataParallel, ZeRO-2)",
            notebook_name=cls.notebook_name,
        )
        register("ddp_sharded", "ddp_sharded_spawn", "`sharded` under its Lightning 1.x name")
        # Lightning 1.9's explicit spellings (its tests checked that they set find_unused_parameters=False).
        register(
            "ddp_sharded_find_unused_parameters_false",
            "ddp_sharded_spawn_find_unused_parameters_false",
            "`sharded` with find_unused_parameters=False (Lightning 1.x name)",
            find_unused_parameters=False,
        )
        # Lightning 2.x's pattern (`ddp_find_unused_parameters_true`) for the opt-in.
        register(
            "sharded_find_unused_parameters_true",
            "sharded_spawn_find_unused_parameters_true",
            "`sharded` with find_unused_parameters=True",
            find_unused_parameters=True,
        )


def _overrides_after_backward(obj: Any) -> bool:
    """Whether ``obj`` (a LightningModule or a callback) defines ``on_after_backward`` outside Lightning's own classes,
    on its class or on itself. Lightning's ``is_overridden`` needs the base class of the namespace ``obj`` comes from
    (``lightning.pytorch`` or ``pytorch_lightning``); the method resolution order tells both apart alike."""
    if "on_after_backward" in vars(obj):
        return True
    # The class whose method runs: the first in the method resolution order that defines it.
    owner = next(cls for cls in type(obj).__mro__ if "on_after_backward" in vars(cls))
    return owner.__module__.split(".")[0] not in ("lightning", "pytorch_lightning")  # not Lightning's empty hook
