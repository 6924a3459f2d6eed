"""What runs inside each DataParallel replica, and how the replicas act as one model.

``nn.DataParallel`` copies the wrapped module for every device on every forward
(``_replicate_for_data_parallel`` makes shallow copies whose ``__dict__`` is a copy of the
original's) and calls the copies from one thread per device. A LightningModule step does more
than compute: it logs, and under manual optimization it calls ``manual_backward`` and steps
optimizers. Done naively every replica would log its own value and step the optimizer once
per replica. :class:`StepCall` holds the state of one split step and gives each replica:

- ``self.log`` that records instead of logging; the records are reduced and logged once, from
  the main thread, after the replicas finish (:meth:`StepCall.replay_logs`);
- lock-step versions of ``manual_backward``, ``optimizers()`` (``step``/``zero_grad``/
  ``toggle_model``), ``lr_schedulers()``, ``clip_gradients`` and ``toggle_optimizer``: every
  replica must reach the call, then it runs once for the whole batch (the losses combined with
  the batch-share weights) and each replica continues with updated parameters;
- its own device as ``self.device``, and the caller's autocast dtype and inference mode, which
  ``torch.nn.parallel.parallel_apply`` does not carry into its threads.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import Tensor, nn

from lightning_mgpu.strategies.dp.reduce import (
    LossReduction,
    combine_logged_values,
    combine_losses,
    loss_weights,
    to_log_tensor,
)

_LOG_SIGNATURE = inspect.signature(LightningModule.log)

#: What every divergence error advises.
_SAME_ORDER = (
    "Under dp every replica runs the same step on its share of the batch and must call manual_backward(),"
    " optimizer.step()/zero_grad(), clip_gradients() and toggle_optimizer() in the same order; avoid data-dependent"
    " calls, or use strategy='ddp'."
)


class ReplicaAbortedError(RuntimeError):
    """A replica stopped because another replica failed; the other replica's error is the cause."""


class ReplicaDivergenceError(RuntimeError):
    """The replicas called optimizer methods in different orders, so they cannot act as one model."""


class _Rendezvous:
    """Runs an action once when every replica has reached the same call (a lock-step collective).

    A ``threading.Barrier`` whose action is the call's: the last replica to arrive runs it while the others wait, and
    all of them get its result. A replica that fails or returns early aborts the barrier, so the others fail promptly
    instead of waiting forever; the first failure is kept as ``root_error``.
    """

    def __init__(self, parties: int) -> None:
        self._barrier = threading.Barrier(parties, action=self._run)
        self._lock = threading.Lock()
        self._calls: dict[int, tuple[str, Any]] = {}  # index -> (call, value), for the round under way
        self._action: Callable[[list[Any]], Any] | None = None
        self._finished: set[int] = set()
        self._result: Any = None
        self.root_error: BaseException | None = None

    def collective(self, index: int, name: str, value: Any, action: Callable[[list[Any]], Any]) -> Any:
        with self._lock:
            if self._finished and self.root_error is None:
                done = sorted(self._finished)
                self._fail(
                    ReplicaDivergenceError(
                        f"dp: replica {index} called {name}, but replica(s) {done} already returned from the step"
                        f" without calling it. {_SAME_ORDER}"
                    )
                )
            if self.root_error is not None:
                raise self._stopped(index)
            self._calls[index] = (name, value)
            self._action = action  # the replicas' actions are alike: any one of them serves
        try:
            self._barrier.wait()  # the last to arrive runs _run; an error it raises comes out here, in its thread
        except threading.BrokenBarrierError:
            raise self._stopped(index) from None
        return self._result

    def _run(self) -> None:
        calls = sorted(self._calls.items())
        self._calls = {}
        if len({name for _, (name, _) in calls}) > 1:
            listed = ", ".join(f"replica {i}: {name}" for i, (name, _) in calls)
            error: BaseException = ReplicaDivergenceError(
                f"dp: the replicas called different methods at the same point ({listed}). {_SAME_ORDER}"
            )
            self.root_error = self.root_error or error
            raise error  # the barrier breaks itself (it holds its lock here: no abort())
        assert self._action is not None
        try:
            self._result = self._action([value for _, (_, value) in calls])
        except BaseException as err:
            self.root_error = self.root_error or err
            raise

    def finish(self, index: int) -> None:
        """Replica ``index`` returned from its step."""
        with self._lock:
            self._finished.add(index)
            if self._calls and self.root_error is None:
                waiting = ", ".join(f"replica {i} in {name}" for i, (name, _) in sorted(self._calls.items()))
                self._fail(
                    ReplicaDivergenceError(
                        f"dp: replica {index} returned from the step while other replicas wait ({waiting})."
                        f" {_SAME_ORDER}"
                    )
                )

    def abort(self, index: int, error: BaseException) -> None:
        """Replica ``index`` failed with ``error``; wake and fail everyone waiting."""
        if not isinstance(error, ReplicaAbortedError):
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if self.root_error is None:
            self.root_error = error
        self._barrier.abort()

    def _stopped(self, index: int) -> BaseException:
        # A divergence is every replica's own error; anything else is the failed replica's, and the others only stop.
        if isinstance(self.root_error, ReplicaDivergenceError):
            return self.root_error
        return ReplicaAbortedError(f"dp: replica {index} stopped because another replica failed: {self.root_error!r}")


@dataclass
class _Logged:
    index: int
    name: str
    value: Any
    params: dict[str, Any]


@dataclass
class _ParamSlot:
    """Where a replica keeps its copy of one parameter (a plain attribute of a replica module)."""

    module: nn.Module
    key: str
    live: Tensor


def _lockstep_target(obj: Any) -> Any:
    # Peels only the replica's own lock-step view: what is left is what the module's optimizers() returned
    # (a LightningOptimizer), so calls still go through the strategy.
    return obj._lockstep_target if isinstance(obj, _Lockstep) else obj


def _describe(obj: Any) -> str:
    return f"{type(_lockstep_target(obj)).__name__}@{id(_lockstep_target(obj)):x}"


@dataclass
class StepCall:
    """One step split across replicas: the shared state the replicas use while they run.

    Args:
        step_name: the LightningModule method to run (``training_step``, ..., or ``forward``).
        original: the LightningModule held by the strategy; lock-step actions and logging run on it.
        devices: one device per replica.
        sizes: samples per replica.
        loss_reduction: how losses combine, see :func:`~lightning_mgpu.strategies.dp.reduce.loss_weights`.
        output_device: where losses and logged values are combined.
    """

    step_name: str
    original: LightningModule
    devices: Sequence[torch.device]
    sizes: Sequence[int]
    loss_reduction: LossReduction
    output_device: torch.device
    autocast: tuple[str, bool, torch.dtype] = field(init=False)
    inference_mode: bool = field(init=False)
    rendezvous: _Rendezvous = field(init=False)
    logs: list[list[_Logged]] = field(init=False)
    replicas: list[LightningModule | None] = field(init=False)
    _slots: dict[int, dict[Tensor, list[_ParamSlot]]] = field(init=False)

    def __post_init__(self) -> None:
        # Captured on the calling (main) thread: parallel_apply re-enters autocast with the default
        # dtype (float16 on CUDA, so bf16-mixed would silently run in fp16) and drops inference mode.
        self.autocast = _autocast_state(self.output_device.type)
        self.inference_mode = torch.is_inference_mode_enabled()
        n = len(self.devices)
        self.rendezvous = _Rendezvous(n)
        self.logs = [[] for _ in range(n)]
        self.replicas = [None] * n
        self._slots = {}

    @property
    def loss_weights(self) -> list[float]:
        return loss_weights(self.sizes, self.loss_reduction)

    # ------------------------------------------------------------------ replica set-up
    @contextmanager
    def replica_scope(self, index: int, replica: LightningModule) -> Iterator[None]:
        """Make ``replica`` act as part of the whole model while its step runs on this thread."""
        device_type, enabled, dtype = self.autocast
        # Set-up failures abort the rendezvous too: replicas already waiting in a lock-step call
        # (manual_backward, optimizer steps) would otherwise wait forever for this one.
        try:
            self._install(index, replica)
            with ExitStack() as stack:
                if self.inference_mode:
                    stack.enter_context(torch.inference_mode())
                stack.enter_context(torch.autocast(device_type, dtype=dtype, enabled=enabled))
                yield
        except BaseException as err:
            self.rendezvous.abort(index, err)
            raise
        self.rendezvous.finish(index)

    def _install(self, index: int, replica: LightningModule) -> None:
        if replica is self.original:
            raise RuntimeError("dp: a replica must be a copy made by DataParallel, not the original LightningModule")
        self.replicas[index] = replica
        # The methods a replica must not run on its own (they log, step or change shared state), as instance attributes:
        # they shadow the class methods on this replica only (replica.__dict__ is its own copy).
        overrides = {
            "log": functools.partial(self._log, index),
            "optimizers": functools.partial(self._optimizers, index),
            "lr_schedulers": functools.partial(self._lr_schedulers, index),
            "manual_backward": functools.partial(self._manual_backward, index),
            "clip_gradients": functools.partial(self._clip_gradients, index),
            "toggle_optimizer": functools.partial(self._toggle, index, True),
            "untoggle_optimizer": functools.partial(self._toggle, index, False),
        }
        replica.__dict__.update(overrides)
        device = self.devices[index]
        for module in replica.modules():
            # Lightning's DeviceDtypeModuleMixin caches the device; the copy still says the root's.
            if isinstance(module.__dict__.get("_device"), torch.device):
                module.__dict__["_device"] = device

    # ------------------------------------------------------------------ logging
    def _log(self, index: int, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        bound = _LOG_SIGNATURE.bind(None, name, value, *args, **kwargs)
        params = {k: v for k, v in bound.arguments.items() if k not in ("self", "name", "value")}
        if _is_metric(value):
            raise TypeError(
                f"dp cannot log the torchmetrics object {type(value).__name__} as {name!r} from a step: the"
                " metric's state is updated on a DataParallel replica and lost after the step. Log the tensor the"
                f" metric returns instead, e.g. `self.log({name!r}, self.metric(preds, target))`, or use"
                " strategy='ddp'."
            )
        self.logs[index].append(_Logged(index=index, name=name, value=value, params=params))

    def replay_logs(self) -> None:
        """Log each key once on the original module, reduced over the replicas that logged it."""
        by_name: dict[str, list[_Logged]] = {}  # in first-logged order, replica 0 first
        for records in self.logs:
            for record in records:
                by_name.setdefault(record.name, []).append(record)
        for name, records in by_name.items():
            self._replay_one(name, records)

    def _replay_one(self, name: str, records: list[_Logged]) -> None:
        params = dict(records[0].params)
        given = [b for r in records if (b := r.params.get("batch_size")) is not None]
        if len(given) == len(records):
            weights = [float(b) for b in given]
            params["batch_size"] = int(sum(given))
        else:
            weights = [float(self.sizes[r.index]) for r in records]
            if len(records) < len(self.sizes):
                # Only some replicas logged it: the epoch average must weigh only their samples.
                params["batch_size"] = int(sum(self.sizes[r.index] for r in records))
        value = _combine_value([r.value for r in records], weights, params, self.output_device)
        self.original.log(name, value, **params)

    # ------------------------------------------------------------------ lock-step optimization
    def _manual_backward(self, index: int, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        def action(losses: list[Tensor]) -> None:
            self.original.manual_backward(
                combine_losses(losses, self.loss_weights, self.output_device), *args, **kwargs
            )

        self.rendezvous.collective(index, "manual_backward()", loss, action)

    def _optimizers(self, index: int, use_pl_optimizer: bool = True) -> Any:
        return _each(self.original.optimizers(use_pl_optimizer=use_pl_optimizer), LockstepOptimizer, self, index)

    def _lr_schedulers(self, index: int) -> Any:
        return _each(self.original.lr_schedulers(), LockstepScheduler, self, index)

    def _clip_gradients(self, index: int, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        target = _lockstep_target(optimizer)
        clip = functools.partial(self.original.clip_gradients, target, *args, **kwargs)
        self.collective_call(index, f"clip_gradients({_describe(target)})", clip)

    def _toggle(self, index: int, on: bool, optimizer: Any) -> None:
        target = _lockstep_target(optimizer)
        method = self.original.toggle_optimizer if on else self.original.untoggle_optimizer
        verb = "toggle_optimizer" if on else "untoggle_optimizer"
        self.collective_call(index, f"{verb}({_describe(target)})", functools.partial(method, target))
        self._sync_requires_grad(index)

    def collective_step(self, index: int, optimizer: Any, kwargs: dict[str, Any]) -> Any:
        result = self.collective_call(
            index, f"optimizer.step({_describe(optimizer)})", lambda: optimizer.step(**kwargs)
        )
        self._refresh(index, optimizer)
        return result

    def collective_call(self, index: int, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` once for all replicas when every one has reached call ``name``; each gets its result."""
        return self.rendezvous.collective(index, name, None, lambda _: fn())

    # ------------------------------------------------------------------ replica parameters
    def _param_slots(self, index: int) -> dict[Tensor, list[_ParamSlot]]:
        if index not in self._slots:
            replica = self.replicas[index]
            assert replica is not None
            slots: dict[Tensor, list[_ParamSlot]] = {}
            # replicate() keeps the module order, so the i-th module of the copy mirrors the i-th original.
            for original, copy in zip(self.original.modules(), replica.modules()):
                for key, param in original._parameters.items():
                    if param is not None and key in copy.__dict__:
                        slots.setdefault(param, []).append(_ParamSlot(copy, key, copy.__dict__[key]))
            self._slots[index] = slots
        return self._slots[index]

    def _refresh(self, index: int, optimizer: Any) -> None:
        """Copy the parameters the optimizer just updated into this replica's copies.

        The root replica's copies share storage with the parameters; the others are copies made
        before the step, so code that runs after ``opt.step()`` in the same step (a second
        forward, the other half of a GAN) would otherwise use stale weights.
        """
        stepped = {p for group in _lockstep_target(optimizer).param_groups for p in group["params"]}
        slots = self._param_slots(index)
        with torch.no_grad():
            for param in stepped:
                for slot in slots.get(param, ()):
                    if slot.live.data_ptr() != param.data_ptr():
                        slot.live.copy_(param)
                        continue
                    # The root replica's copy is a view that Broadcast returned for the parameter
                    # itself; after the in-place update autograd refuses that view. On the root
                    # device the parameter itself is the right tensor to use from now on.
                    slot.live = param
                    slot.module.__dict__[slot.key] = param if param.requires_grad else param.detach()

    def _sync_requires_grad(self, index: int) -> None:
        """Mirror ``toggle_optimizer`` on this replica: frozen parameters are used detached.

        A replica's parameters are non-leaf copies whose ``requires_grad`` cannot be changed, so a
        parameter toggled off is replaced by a detached view for the rest of the step.
        """
        for param, slots in self._param_slots(index).items():
            for slot in slots:
                slot.module.__dict__[slot.key] = slot.live if param.requires_grad else slot.live.detach()


def _autocast_state(device_type: str) -> tuple[str, bool, torch.dtype]:
    """``(device_type, enabled, dtype)`` of autocast on this thread."""
    return device_type, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


def _each(found: Any, view: type[_Lockstep], call: StepCall, index: int) -> Any:
    """``view`` around what ``optimizers()``/``lr_schedulers()`` returned: one object, a list of them, or ``None``."""
    if found is None:
        return None
    return [view(o, call, index) for o in found] if isinstance(found, list) else view(found, call, index)


def _is_metric(value: Any) -> bool:
    try:
        from torchmetrics import Metric
    except ImportError:  # torchmetrics ships with Lightning; be safe anyway
        return False
    return isinstance(value, Metric)


def _combine_value(values: list[Any], weights: list[float], params: dict[str, Any], device: torch.device) -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {k: _combine_value([v[k] for v in values], weights, params, device) for k in first}
    if params.get("enable_graph") and isinstance(first, Tensor):
        tensors = [v.to(device) for v in values]
    else:
        tensors = [to_log_tensor(v, device) for v in values]
    return combine_logged_values(tensors, weights, params.get("reduce_fx", "mean"))


class _Lockstep:
    """A replica's view of an object the whole model shares: every attribute not overridden is the object's."""

    def __init__(self, target: Any, call: StepCall, index: int) -> None:
        self._lockstep_target = target
        self._lockstep_call = call
        self._lockstep_index = index

    def __getattr__(self, item: str) -> Any:
        return getattr(self._lockstep_target, item)


class LockstepOptimizer(_Lockstep):
    """What ``self.optimizers()`` returns inside a replica: ``step``/``zero_grad`` run once for all replicas.

    Every other attribute (``param_groups``, ``state``, ...) is the wrapped optimizer's.
    """

    @property
    def optimizer(self) -> Any:
        return getattr(self._lockstep_target, "optimizer", self._lockstep_target)

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Run ``closure`` on this replica, then step once for all replicas.

        Raises:
            NotImplementedError: the optimizer evaluates its closure more than once (LBFGS).
        """
        if isinstance(self.optimizer, torch.optim.LBFGS):
            raise NotImplementedError(
                "dp cannot run LBFGS under manual optimization: it evaluates the closure several times inside"
                " one step, which DataParallel replicas cannot share. Use automatic optimization or"
                " strategy='ddp'."
            )
        # Optimizers that call the closure once (all but LBFGS) give the same result when it runs
        # first: each replica computes its share and the shared manual_backward reduces it.
        result = closure() if closure is not None else None
        self._lockstep_call.collective_step(self._lockstep_index, self._lockstep_target, kwargs)
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        zero_grad = functools.partial(self._lockstep_target.zero_grad, set_to_none=set_to_none)
        self._lockstep_call.collective_call(self._lockstep_index, f"optimizer.zero_grad({_describe(self)})", zero_grad)

    @contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Generator[None, None, None]:
        """As ``LightningOptimizer.toggle_model``; ``sync_grad`` has no effect under dp (nothing to sync)."""
        self._lockstep_call._toggle(self._lockstep_index, True, self._lockstep_target)
        yield
        self._lockstep_call._toggle(self._lockstep_index, False, self._lockstep_target)

    def __repr__(self) -> str:
        return f"LockstepOptimizer({self._lockstep_target!r})"


class LockstepScheduler(_Lockstep):
    """What ``self.lr_schedulers()`` returns inside a replica: ``step`` runs once for all replicas."""

    def step(self, *args: Any, **kwargs: Any) -> None:
        step = functools.partial(self._lockstep_target.step, *args, **kwargs)
        self._lockstep_call.collective_call(self._lockstep_index, f"lr_scheduler.step({_describe(self)})", step)


class StepModule(nn.Module):
    """The module DataParallel replicates: its ``forward`` runs a step of the module it holds.

    Lightning's ``_ForwardRedirection`` patches ``forward`` on the *original* LightningModule
    instance. A replica is a shallow copy whose ``__dict__`` carries that patched bound method,
    so every replica would run the original module on the root device. Here ``forward`` looks the
    step up on ``self.module``, which in a replica is that replica's own copy.

    Args:
        module: the LightningModule.
    """

    def __init__(self, module: LightningModule) -> None:
        super().__init__()
        self.module = module

    def forward(self, call: StepCall, index: int, *args: Any, **kwargs: Any) -> Any:
        """Run ``call.step_name`` of this replica's module (replica ``index``, in device order) on its chunk."""
        module = self.module
        with call.replica_scope(index, module):
            return getattr(module, call.step_name)(*args, **kwargs)
