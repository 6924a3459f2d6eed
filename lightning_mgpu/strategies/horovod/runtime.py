"""Horovod plumbing that :class:`~lightning_mgpu.strategies.HorovodStrategy` and its launcher share: the import with a
useful error, the controllers a launch needs, reduce ops, and ``hvd.DistributedOptimizer``'s gradient hooks steered.

Horovod is never imported at module level: ``import lightning_mgpu`` must work without it. The optimizer helpers use
three private fields of horovod 0.28's ``_DistributedOptimizer`` (``_allreduce_delay``, ``_handles``,
``_requires_update``); the version is pinned in ``pyproject.toml`` (extra ``horovod``) and the integration tests
exercise every one of them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from torch.optim import Optimizer

from lightning_mgpu.utilities.imports import MissingDependencyError, require
from lightning_mgpu.utilities.optimizers import unwrap_optimizer

FEATURE = "strategy='horovod'"
BUILD_HINT = "python -m lightning_mgpu build-horovod"

# Rank/size variables set by Horovod's own launchers (horovodrun --gloo, horovod.run) and by MPI
# launchers; the same list horovod.runner.common.util.env.get_env_rank_and_size() reads.
_GLOO_RANK_VARS = ("HOROVOD_RANK", "HOROVOD_SIZE")
_MPI_RANK_VARS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"))

# Added to every gradient hook's countdown while sync is blocked, so no countdown reaches zero
# (the point where horovod launches the allreduce) inside a blocked backward pass.
_BLOCKED_OFFSET = 1 << 40


class HorovodControllerError(RuntimeError):
    """Horovod was built without the controller (Gloo or MPI) that this launch needs."""


def horovod_torch() -> ModuleType:
    """Import ``horovod.torch`` or raise an error that says how to install it.

    Raises:
        MissingDependencyError: horovod is not installed, or its PyTorch extension does not load
            (typically built against another torch version).
    """
    require("horovod", FEATURE)
    try:
        import horovod.torch as hvd
    except ImportError as err:
        raise MissingDependencyError(
            f"{FEATURE} needs horovod's PyTorch extension, which failed to import ({err}). It must be"
            f" built against the installed torch {torch.__version__}; rebuild it with: {BUILD_HINT}"
        ) from err
    return hvd


def is_initialized() -> bool:
    """Whether ``hvd.init()`` has run in this process (False when horovod is not importable)."""
    try:
        import horovod.torch as hvd
    except ImportError:
        return False
    return bool(hvd.is_initialized())


def launched_by_horovod() -> bool:
    """Whether this process was started by horovodrun, ``horovod.run`` or an MPI launcher."""
    if all(v in os.environ for v in _GLOO_RANK_VARS):
        return True
    return any(all(v in os.environ for v in pair) for pair in _MPI_RANK_VARS)


def required_controller() -> str | None:
    """The controller this process's launcher uses: ``"gloo"``, ``"mpi"`` or ``None`` (no launcher)."""
    if os.environ.get("HOROVOD_CONTROLLER") in ("gloo", "mpi"):
        return os.environ["HOROVOD_CONTROLLER"]
    if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ or all(v in os.environ for v in _GLOO_RANK_VARS):
        return "gloo"
    if any(all(v in os.environ for v in pair) for pair in _MPI_RANK_VARS):
        return "mpi"
    return None


def check_controller(hvd: ModuleType, controller: str | None) -> None:
    """Raise :class:`HorovodControllerError` if ``controller`` was not built into horovod.

    Args:
        hvd: ``horovod.torch``.
        controller: ``"gloo"``, ``"mpi"`` or ``None`` (a single process: either will do).
    """
    gloo, mpi = bool(hvd.gloo_built()), bool(hvd.mpi_built())
    if controller == "gloo" and not gloo:
        raise HorovodControllerError(
            "This Horovod job uses the Gloo controller (horovodrun --gloo, or the self-launch of"
            " `Trainer(strategy='horovod', devices=N)`), but the installed horovod was built without Gloo"
            f" (hvd.gloo_built() is False; MPI built: {mpi}). Rebuild it with Gloo: {BUILD_HINT}"
            + (
                ", or launch with MPI: `horovodrun -np N python train.py` / `mpirun -np N python train.py`."
                if mpi
                else "."
            )
        )
    if controller == "mpi" and not mpi:
        raise HorovodControllerError(
            "This process was started by an MPI launcher (mpirun / horovodrun without --gloo), but the"
            f" installed horovod was built without MPI (hvd.mpi_built() is False; Gloo built: {gloo})."
            " Launch with Gloo instead: `horovodrun --gloo -np N python train.py`, or rebuild horovod"
            " with HOROVOD_WITH_MPI=1 after installing an MPI implementation."
        )
    if controller is None and not (gloo or mpi):
        raise HorovodControllerError(
            f"The installed horovod was built with neither Gloo nor MPI, so it cannot run. Rebuild it: {BUILD_HINT}"
        )


def build_info() -> dict[str, Any]:
    """What the installed horovod can do, without initialising it (for ``python -m lightning_mgpu info``).

    Returns:
        ``{"importable": False, "error": ...}``, or ``{"importable": True, "version", "gloo", "mpi",
        "nccl", "cuda"}`` with booleans for the controllers and GPU support it was built with.
    """
    try:
        hvd = horovod_torch()
    except MissingDependencyError as err:
        return {"importable": False, "error": str(err)}
    import horovod

    return {
        "importable": True,
        "version": getattr(horovod, "__version__", None),
        "gloo": bool(hvd.gloo_built()),
        "mpi": bool(hvd.mpi_built()),
        "nccl": bool(hvd.nccl_built()),
        "cuda": bool(hvd.cuda_built()),
    }


def horovod_op(hvd: ModuleType, reduce_op: Any) -> Any:
    """Map Lightning's ``reduce_op`` (a string or ``torch.distributed.ReduceOp``) to horovod's op.

    Raises:
        ValueError: the op has no horovod equivalent.
    """
    if reduce_op is None:
        return hvd.Average
    name = reduce_op.lower() if isinstance(reduce_op, str) else _torch_reduce_op_name(reduce_op)
    ops = {
        "mean": hvd.Average,
        "avg": hvd.Average,
        "sum": hvd.Sum,
        "max": hvd.Max,
        "min": hvd.Min,
        "product": hvd.Product,
    }
    if name not in ops:
        raise ValueError(f"reduce_op={reduce_op!r} is not supported by Horovod; use one of {sorted(ops)}.")
    return ops[name]


def _torch_reduce_op_name(reduce_op: Any) -> str | None:
    try:
        from torch.distributed import ReduceOp
    except ImportError:  # torch built without distributed support
        return None
    for name in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        if hasattr(ReduceOp, name) and reduce_op == getattr(ReduceOp, name):
            return name.lower()
    return None


# ----------------------------------------------------------------------------- optimizers


def is_distributed_optimizer(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a ``hvd.DistributedOptimizer`` (with gradient hooks to steer)."""
    return all(hasattr(optimizer, a) for a in ("synchronize", "skip_synchronize", "_allreduce_delay", "_handles"))


def make_lightning_safe(optimizer: Any) -> Any:
    """Let ``hvd.DistributedOptimizer``'s methods be called through Lightning's ``LightningOptimizer``.

    Horovod builds a fresh class per optimizer whose methods call ``super(self.__class__, self)``.
    ``LightningOptimizer`` subclasses that class, so ``self.optimizers().zero_grad()`` in manual
    optimization recursed forever, and ``opt.synchronize()`` / ``opt.skip_synchronize()`` set their
    flags on the wrapper instead of the optimizer. Every method now runs on the wrapped optimizer
    itself, and ``zero_grad`` accepts ``set_to_none`` again (horovod's drops it). Workaround: remove when horovod's
    methods stop calling ``super(self.__class__, self)`` (0.28.1, the last release, still does).

    Returns:
        ``optimizer``, whose (private, per-call) class was patched.
    """
    cls = type(optimizer)
    if cls.__dict__.get("_lightning_mgpu_safe"):
        return optimizer
    cls._lightning_mgpu_safe = True

    def unwrap(obj: Any) -> Any:
        return obj if type(obj) is cls else unwrap_optimizer(obj)

    for name in ("step", "load_state_dict", "synchronize", "skip_synchronize", "set_backward_passes_per_step"):
        original = cls.__dict__.get(name)
        if original is None:
            continue

        @functools.wraps(original)
        def method(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            return _original(unwrap(self), *args, **kwargs)

        setattr(cls, name, method)

    def zero_grad(self: Any, set_to_none: bool = True) -> None:
        raw = unwrap(self)
        if raw._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after a backward pass whose gradients were not synchronized yet"
                " (inside block_backward_sync() / toggle_model(sync_grad=False)). Zero the gradients only after"
                " optimizer.step(), at the start of the next accumulation window."
            )
        return super(cls, raw).zero_grad(set_to_none=set_to_none)

    cls.zero_grad = zero_grad
    return optimizer


def make_picklable(optimizer: Any) -> Any:
    """Let ``hvd.DistributedOptimizer`` be pickled, as the plain optimizer it wraps.

    Horovod builds the wrapper's class with ``type()`` at each call (``horovod.torch.optimizer.SGD``), which pickle
    cannot find by name: ``torch.save(model)`` failed with "Can't pickle <class 'horovod.torch.optimizer.SGD'>" for a
    model that reaches its optimizer (one keeping ``self.trainer.optimizers[0]``, or the arguments of its hooks), where
    under ``ddp`` it saves. The class now pickles as the user's optimizer class with torch's own state (defaults,
    state, param groups): what the wrapper adds (gradient hooks, handles) belongs to the job and means nothing once
    loaded elsewhere. Checkpoints are not concerned (they hold ``state_dict()``). Workaround: remove when horovod's
    classes can be pickled (not in 0.28.1, the last release).

    Returns:
        ``optimizer``, whose (private, per-call) class was patched.
    """
    cls = type(optimizer)
    if cls.__dict__.get("_lightning_mgpu_picklable"):
        return optimizer
    cls._lightning_mgpu_picklable = True
    # DistributedOptimizer derives the class from the user's optimizer class, its only base.
    base: Any = cls.__bases__[0]

    def __reduce_ex__(self: Any, protocol: Any) -> tuple[Any, ...]:  # noqa: N807
        raw = unwrap_optimizer(self)  # through LightningOptimizer, whose class subclasses this one
        return (_plain_optimizer, (base, base.__getstate__(raw)))

    cls.__reduce_ex__ = __reduce_ex__  # type: ignore[assignment]
    return optimizer


def _plain_optimizer(cls: type[Optimizer], state: dict[str, Any]) -> Optimizer:
    """Rebuild a pickled ``hvd.DistributedOptimizer`` as an instance of the optimizer class it wrapped."""
    optimizer = cls.__new__(cls)
    optimizer.__setstate__(state)
    return optimizer


def named_parameters_for(module: torch.nn.Module, optimizer: Optimizer, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """``(name, parameter)`` for every parameter of ``optimizer``, named after ``module``'s parameters.

    Horovod pairs allreduces across ranks by name, so the names must be unique and identical on
    every rank. Parameters the module does not own (rare) get positional names.
    """
    names = {p: n for n, p in module.named_parameters()}
    out: list[tuple[str, torch.Tensor]] = []
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            out.append((f"{prefix}.{names.get(p, f'group{g}.param{i}')}", p))
    return out


def has_pending_gradients(optimizer: Any) -> bool:
    """Whether a backward pass touched ``optimizer``'s parameters since its last ``synchronize()``."""
    return bool(optimizer._handles)


def has_launched_allreduce(optimizer: Any) -> bool:
    """Whether a gradient hook launched an allreduce (the parameter's countdown ran out) since the last sync.

    False when backward passes only accumulated locally (inside ``block_backward_sync()``), and for
    an optimizer whose parameters the last backward pass did not reach.
    """
    return any(handle is not None for handle, _ in optimizer._handles.values())


@contextmanager
def blocked_gradient_hooks(optimizers: Iterable[Any]) -> Iterator[None]:
    """Keep ``hvd.DistributedOptimizer``'s backward hooks from launching allreduces.

    Horovod counts backward passes per parameter and launches the allreduce when the count of
    ``backward_passes_per_step`` is used up. Inside this context the counters are lifted out of
    reach, so gradients only accumulate locally. On exit the passes made inside still count, but
    the counter never drops below one: the next unblocked backward pass (or ``synchronize()``)
    then reduces everything accumulated so far, exactly once.
    """
    optimizers = list(optimizers)
    before = [dict(opt._allreduce_delay) for opt in optimizers]
    for opt in optimizers:
        for p in opt._allreduce_delay:
            opt._allreduce_delay[p] += _BLOCKED_OFFSET
    try:
        yield
    finally:
        for opt, saved in zip(optimizers, before):
            for p, delay in saved.items():
                now = opt._allreduce_delay[p]
                if now < _BLOCKED_OFFSET // 2:
                    # synchronize() ran inside the context and reset the counter: keep its value.
                    continue
                passes = delay + _BLOCKED_OFFSET - now
                opt._allreduce_delay[p] = max(1, delay - passes)


def disarm(optimizer: Any) -> None:
    """Turn a finished ``hvd.DistributedOptimizer`` into a plain local optimizer.

    Horovod registers hooks on the parameters' gradient accumulators and keeps no handle to
    remove them. After ``fit`` they would still launch allreduces on every later backward pass
    (a second ``fit`` of the same model, a user's own loop) and deadlock or double-reduce. The
    hooks stay, but their countdowns never fall due and what they record is dropped. Remove when horovod can remove
    its hooks (not in 0.28.1, the last release).
    """
    optimizer._requires_update = set()
    optimizer._handles = _Discarding()
    optimizer._allreduce_delay = _NeverDue(optimizer._allreduce_delay)


class _NeverDue(dict):
    """A countdown table whose counters never reach zero."""

    def __init__(self, keys: Iterable[Any]) -> None:
        super().__init__((k, _BLOCKED_OFFSET) for k in keys)

    def __setitem__(self, key: Any, value: int) -> None:
        super().__setitem__(key, _BLOCKED_OFFSET)


class _Discarding(dict):
    """A handle table that stays empty."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass
