"""Activation checkpointing under every strategy, with modules chosen by class, name pattern or predicate.

Lightning 2.6 offers activation checkpointing only through ``FSDPStrategy(activation_checkpointing_policy=...)``
and DeepSpeed. :class:`ActivationCheckpointing` brings it to ``dp``, ``ddp``, ``ddp_spawn``, ``horovod``,
``sharded`` and single-device training, with selective checkpointing (``every_k``) and without changing
``state_dict`` keys.

How it works: each chosen submodule keeps its identity (same object, same parent, same parameters) and gets
its class swapped in place for a generated subclass whose ``forward`` runs the original ``forward`` under
``torch.utils.checkpoint`` (non-reentrant). Swapping the class rather than assigning ``module.forward``
matters for ``dp``: ``nn.DataParallel`` replicas are shallow copies that keep the class but would inherit a
bound method of the original module, and so compute on the wrong device.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.weak import WeakIdKeyDictionary
from typing_extensions import override

from lightning_mgpu.utilities.imports import require
from lightning_mgpu.utilities.modules import ModuleMatcher, ModuleSpec, as_spec_list

Impl = Literal["torch", "fairscale"]

_ORIGINAL_CLASS = "_lightning_mgpu_ac_original_class"
_IMPL = "_lightning_mgpu_ac_impl"
_CLASS_CACHE: dict[tuple[type[nn.Module], str], type[nn.Module]] = {}


class ActivationCheckpointing(Callback):
    """Recompute the activations of chosen submodules during backward instead of keeping them in memory.

    What Lightning 2.6 does not do: it has activation checkpointing only for FSDP and DeepSpeed. This callback
    works under every strategy (``dp``, ``ddp``, ``ddp_spawn``, ``horovod``, ``sharded``, one device), chooses
    layers by class, qualified-name pattern or predicate, checkpoints every k-th match for selective
    checkpointing, and leaves ``state_dict`` keys unchanged, so checkpoints load with or without it.

    The chosen modules are patched in place when the callback's ``setup`` runs, which is before the strategy
    wraps the model; modules that ``configure_model`` builds are patched right after it returns. Modules the
    strategy replaces while wrapping (e.g. ``sync_batchnorm=True`` converts BatchNorm layers) are patched again
    in ``on_fit_start``. At ``teardown`` every module gets its own class back.

    Gradients are exact: the recomputation replays the forward's RNG state (dropout draws the same mask) and
    autocast state, and BatchNorm running statistics are updated once per forward, as without checkpointing.

    Args:
        modules: what to checkpoint; each entry is a module class (every instance, ``isinstance``), a string
            (an ``fnmatch`` pattern over qualified names from ``model.named_modules()``, e.g. ``"net.blocks.*"``;
            ``*`` also matches dots) or a callable predicate ``fn(module) -> bool`` or
            ``fn(name, module) -> bool``. When a module and one of its descendants both match, only the outer
            one is checkpointed. Every entry must match at least one module. Matched modules that work in
            place (``inplace=True``, e.g. ``nn.ReLU(inplace=True)``) are left alone: they overwrite their input,
            so they cannot be recomputed from it, and checkpointing them would save nothing.
        every_k: checkpoint only the k-th, 2k-th, ... of the matched modules (in ``named_modules()`` order),
            trading memory for speed (selective checkpointing). ``1`` checkpoints all of them.
        impl: ``"torch"`` uses non-reentrant ``torch.utils.checkpoint``; ``"fairscale"`` uses the machinery
            behind FairScale's ``checkpoint_wrapper`` (an autograd Function that also works when no input
            requires grad; needs ``fairscale``). Both keep BatchNorm statistics exact and replay autocast.

    Raises:
        TypeError: an entry of ``modules`` is neither a module class, a string nor a callable.
        ValueError: ``modules`` is empty, ``every_k < 1``, ``impl`` is unknown, or (during ``setup``) an entry
            matches no submodule; the message lists the closest module names.
        MissingDependencyError: ``impl="fairscale"`` and FairScale is not installed.

    Example::

        from lightning_mgpu.callbacks import ActivationCheckpointing

        ac = ActivationCheckpointing(modules=[nn.TransformerEncoderLayer])       # by class
        ac = ActivationCheckpointing(modules=["net.blocks.*"], every_k=2)         # every 2nd block
        ac = ActivationCheckpointing(modules=[lambda name, m: name.endswith("mlp")])
        Trainer(strategy="ddp", devices=2, callbacks=[ac]).fit(model)
    """

    def __init__(self, modules: Sequence[ModuleSpec], every_k: int = 1, impl: Impl = "torch") -> None:
        self.specs: list[ModuleMatcher] = [
            ModuleMatcher.parse(spec, owner="ActivationCheckpointing") for spec in as_spec_list(modules)
        ]
        if not self.specs:
            raise ValueError(
                "ActivationCheckpointing(modules=[]) checkpoints nothing. Pass at least one module class,"
                " name pattern or predicate, e.g. ActivationCheckpointing(modules=['net.blocks.*'])."
            )
        if not isinstance(every_k, int) or isinstance(every_k, bool) or every_k < 1:
            raise ValueError(f"every_k must be an integer >= 1 (1 checkpoints every match), got {every_k!r}.")
        if impl not in ("torch", "fairscale"):
            raise ValueError(f"impl must be 'torch' or 'fairscale', got {impl!r}.")
        if impl == "fairscale":
            require("fairscale", "ActivationCheckpointing(impl='fairscale')")
        self.every_k = every_k
        self.impl: Impl = impl
        self.checkpointed_names: list[str] = []
        self.skipped_inplace: list[str] = []
        self._patched: list[tuple[str, weakref.ref[nn.Module]]] = []  # (name, module) of every class swap, to undo
        self._deferred_module: pl.LightningModule | None = None

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(specs=[s.label for s in self.specs], every_k=self.every_k, impl=self.impl)

    def select(self, root: nn.Module, strict: bool = True) -> list[tuple[str, nn.Module]]:
        """The ``(name, module)`` pairs of ``root`` that this callback checkpoints.

        Args:
            root: the model to search.
            strict: raise when an entry matches nothing or nothing is selected. Off when re-applying after the
                strategy rebuilt modules: the user's choice was validated the first time.

        Raises:
            ValueError: (``strict``) an entry of ``modules`` matches nothing, or ``every_k`` leaves nothing selected.
        """
        named = [(name, m) for name, m in root.named_modules() if name]  # the root itself is never checkpointed
        hits = [False] * len(self.specs)
        matches: list[tuple[str, nn.Module]] = []
        for name, module in named:
            matched = False
            for i, spec in enumerate(self.specs):
                if spec.matches(name, module):
                    hits[i] = matched = True
            if matched:
                matches.append((name, module))
        for spec, hit in zip(self.specs, hits):
            if not hit and strict:
                raise ValueError(spec.no_match_message(type(root).__name__, named))
        outermost = _outermost(matches)
        # An op that overwrites its own input (ReLU(inplace=True)) cannot be recomputed from that input, and
        # checkpointing it saves nothing; it stays as it is. In-place ops *inside* a chosen block are fine.
        self.skipped_inplace = [name for name, m in outermost if getattr(m, "inplace", False) is True]
        eligible = [(name, m) for name, m in outermost if name not in self.skipped_inplace]
        selected = eligible[self.every_k - 1 :: self.every_k]
        if not selected and strict:
            raise ValueError(
                f"ActivationCheckpointing(every_k={self.every_k}) selects nothing: {len(eligible)} module(s) can be"
                f" checkpointed ({', '.join(n for n, _ in eligible) or 'none'}"
                + (
                    f"; in-place modules are never checkpointed: {', '.join(self.skipped_inplace)}"
                    if self.skipped_inplace
                    else ""
                )
                + "). Lower every_k or match more modules, e.g. whole blocks rather than single activations."
            )
        return selected

    def apply(self, root: nn.Module, strict: bool = True) -> list[str]:
        """Patch the selected submodules of ``root`` in place; idempotent. Returns the newly patched names.

        ``strict`` is passed to :meth:`select`.
        """
        newly: list[str] = []
        for name, module in self.select(root, strict=strict):
            if getattr(type(module), _ORIGINAL_CLASS, None) is not None:
                continue  # already checkpointed (by this or an earlier application)
            if "forward" in module.__dict__:
                raise ValueError(
                    f"Cannot checkpoint {name!r}: its `forward` was replaced on the instance (by another wrapper"
                    " or a monkeypatch), which would bypass checkpointing. Remove that patch, or select a parent"
                    " or child module instead."
                )
            module.__class__ = _checkpointed_class(type(module), self.impl)
            self._patched.append((name, weakref.ref(module)))
            newly.append(name)
        self.checkpointed_names.extend(newly)
        return newly

    def restore(self) -> None:
        """Give every patched module its own class back."""
        for _, ref in self._patched:
            module = ref()
            if module is not None:
                original = getattr(type(module), _ORIGINAL_CLASS, None)
                if original is not None:
                    module.__class__ = original
        self._patched, self.checkpointed_names = [], []

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return  # no backward outside fitting, so nothing to save memory on
        if is_overridden("configure_model", pl_module):
            # `setup` runs before `configure_model`; patch what it builds right after it returns.
            self._defer_until_configured(pl_module)
        else:
            self._apply_and_report(pl_module)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The strategy may have replaced modules while wrapping (SyncBatchNorm conversion); patch those too.
        if self._deferred_module is not None:
            raise RuntimeError(
                "ActivationCheckpointing: `configure_model` was overridden but never called before fitting"
                " started; the chosen modules could not be patched."
            )
        # Not strict: the choice was validated in setup, and a class spec can legitimately match nothing now
        # (sync_batchnorm turns nn.BatchNorm2d into nn.SyncBatchNorm, which is not a BatchNorm2d).
        newly = self.apply(pl_module, strict=False)
        if newly:
            rank_zero_info(f"ActivationCheckpointing: also checkpointing {len(newly)} module(s) the strategy rebuilt.")
        # Modules patched in setup that the strategy swapped out are no longer part of the model. Keep them in
        # `_patched` (restore() undoes their class swap all the same) but not among the checkpointed names.
        present = {id(m) for m in pl_module.modules()}
        live = [name for name, ref in self._patched if (m := ref()) is not None and id(m) in present]
        self.checkpointed_names = live
        replaced = [name for name, _ in self._patched if name not in live]
        if replaced:
            shown = ", ".join(replaced[:8]) + (f", ... ({len(replaced) - 8} more)" if len(replaced) > 8 else "")
            rank_zero_warn(
                f"ActivationCheckpointing: the strategy replaced {len(replaced)} checkpointed module(s) with modules"
                f" that no longer match {[s.label for s in self.specs]} ({shown}), so they are not checkpointed."
                " Select them by name pattern (e.g. 'features.*'), which survives the replacement, or by the new"
                " class (e.g. nn.SyncBatchNorm with sync_batchnorm=True)."
            )

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._undo_deferral()
        self.restore()

    def _apply_and_report(self, pl_module: nn.Module) -> None:
        self.apply(pl_module)
        names = self.checkpointed_names
        shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
        skipped = f"; left alone (in-place): {', '.join(self.skipped_inplace)}" if self.skipped_inplace else ""
        rank_zero_info(
            f"ActivationCheckpointing ({self.impl}, every_k={self.every_k}): {len(names)} module(s): {shown}{skipped}"
        )

    def _defer_until_configured(self, pl_module: pl.LightningModule) -> None:
        original = pl_module.configure_model
        callback = self

        # A one-shot instance attribute; `__wrapped__` keeps `is_overridden("configure_model", ...)` true,
        # so Lightning still calls it.
        def configure_model_then_checkpoint(*args: Any, **kwargs: Any) -> Any:
            callback._undo_deferral()
            out = original(*args, **kwargs)
            callback._apply_and_report(pl_module)
            return out

        configure_model_then_checkpoint.__wrapped__ = original  # type: ignore[attr-defined]
        pl_module.configure_model = configure_model_then_checkpoint  # type: ignore[method-assign]
        self._deferred_module = pl_module

    def _undo_deferral(self) -> None:
        if self._deferred_module is not None:
            self._deferred_module.__dict__.pop("configure_model", None)
            self._deferred_module = None


def _outermost(matches: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """Drop matches nested inside an earlier match: checkpointing both would recompute twice."""
    kept: list[tuple[str, nn.Module]] = []
    kept_names: set[str] = set()
    for name, module in matches:
        parts = name.split(".")
        if any(".".join(parts[:i]) in kept_names for i in range(1, len(parts))):
            continue
        kept.append((name, module))
        kept_names.add(name)
    return kept


def _checkpointed_class(cls: type[nn.Module], impl: str) -> type[nn.Module]:
    """A subclass of ``cls`` whose forward is checkpointed; cached so each class is derived once."""
    key = (cls, impl)
    if key not in _CLASS_CACHE:
        namespace = {
            "forward": _torch_checkpointed_forward if impl == "torch" else _fairscale_checkpointed_forward,
            # Same names, so printing the model and `type(m).__name__` look unchanged.
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            # Pickle/deepcopy as the original class: the generated class cannot be found by name.
            "__reduce_ex__": _reduce_as_original,
            _ORIGINAL_CLASS: cls,
            _IMPL: impl,
        }
        _CLASS_CACHE[key] = type(cls)(cls.__name__, (cls,), namespace)  # type: ignore[misc]  # cls's own metaclass
    return _CLASS_CACHE[key]


def _reduce_as_original(self: nn.Module, protocol: int) -> Any:
    reduced = object.__reduce_ex__(self, protocol)  # (callable, args, state, listitems, dictitems)
    return (_new_instance, (getattr(type(self), _ORIGINAL_CLASS),), *reduced[2:])


def _new_instance(cls: type[nn.Module]) -> nn.Module:
    return cls.__new__(cls)


def _original_forward(module: nn.Module) -> Callable[..., Any]:
    return getattr(type(module), _ORIGINAL_CLASS).forward


def _torch_checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    forward = _original_forward(self)
    if not torch.is_grad_enabled():
        return forward(self, *args, **kwargs)  # nothing is saved for backward, so nothing to recompute
    calls = 0

    def run(*a: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            return forward(self, *a, **kw)
        # The recomputation must not update BatchNorm running statistics a second time.
        with _frozen_batchnorm_stats(self):
            return forward(self, *a, **kw)

    return torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)


def _fairscale_checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    from fairscale.nn.checkpoint import checkpoint_activations as fs

    if not hasattr(fs, "_checkpointed_forward"):
        raise RuntimeError(
            "ActivationCheckpointing(impl='fairscale') needs fairscale.nn.checkpoint.checkpoint_activations."
            "_checkpointed_forward (fairscale 0.4.x). Install fairscale==0.4.13 or use impl='torch'."
        )
    _quiet_fairscale_input_warning()
    run = _replaying_autocast(_original_forward(self), fs.is_recomputing)
    # A weak reference to *this* module (a dp replica, if it is one), never to the module the class came from.
    return fs._checkpointed_forward(run, weakref.ref(self), False, *args, **kwargs)


def _quiet_fairscale_input_warning() -> None:
    # FairScale passes a dummy tensor that requires grad, so parameter gradients are computed even when no
    # input requires grad; torch's validity check warns regardless. Silence exactly that message (adding
    # the same filter again replaces it, so the filter list does not grow).
    warnings.filterwarnings("ignore", message="None of the inputs have requires_grad=True", category=UserWarning)


def _replaying_autocast(forward: Callable[..., Any], is_recomputing: Callable[[], bool]) -> Callable[..., Any]:
    """Wrap ``forward`` so its recomputation runs under the autocast state of the original forward.

    FairScale re-enters only CUDA float16 autocast; CPU autocast and bfloat16 would otherwise be dropped.
    BatchNorm running statistics are updated once: FairScale runs the first forward under ``no_grad`` and
    recomputes with grad, so the first pass runs with ``track_running_stats`` off, as FairScale's own
    ``patch_batchnorm`` does (whose closure hooks would make the model unpicklable).
    """
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    states = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in devices]

    def run(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if not is_recomputing():
            if torch.is_grad_enabled():  # FairScale bypassed checkpointing (disable_checkpointing())
                return forward(module, *args, **kwargs)
            with _untracked_batchnorm_stats(module):
                return forward(module, *args, **kwargs)
        with contextlib.ExitStack() as stack:
            for device, enabled, dtype in states:
                stack.enter_context(torch.autocast(device, dtype=dtype, enabled=enabled))
            return forward(module, *args, **kwargs)

    return run


_STAT_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
# A scratch tensor per statistics buffer, found by the buffer itself (a dp replica's buffers are new tensors each step,
# so its scratch goes with them), allocated once and reused by every recomputation: nothing reads what lands in it.
# (torch's WeakIdKeyDictionary: tensors compare elementwise, so a plain WeakKeyDictionary cannot hold them.)
_SCRATCH = WeakIdKeyDictionary()


@contextlib.contextmanager
def _frozen_batchnorm_stats(module: nn.Module) -> Iterator[None]:
    """Send the recomputation's BatchNorm statistics updates into scratch buffers, and put the real ones back.

    In training mode BatchNorm normalises with the batch's own statistics; its running statistics are only written (and
    saved for a backward that does not read them in training mode). So the recomputation may write them anywhere of the
    same shape: swapping the buffers costs no copy, where saving and restoring them cost 6 kernels per layer per step.
    Switching tracking off instead is refused by torch's checkpoint: the recomputation would save fewer tensors than
    the forward did (``CheckpointError``).
    """
    swapped: list[tuple[nn.Module, str, torch.Tensor]] = []
    for m in module.modules():
        if isinstance(m, _BatchNorm) and m.training and m.track_running_stats:
            for name in _STAT_BUFFERS:
                buf = m._buffers.get(name)
                if buf is None:
                    continue
                scratch = _SCRATCH.get(buf)
                if scratch is None:
                    scratch = _SCRATCH[buf] = buf.detach().clone()
                m._buffers[name] = scratch
                swapped.append((m, name, buf))
    try:
        yield
    finally:
        for m, name, buf in swapped:
            m._buffers[name] = buf


@contextlib.contextmanager
def _untracked_batchnorm_stats(module: nn.Module) -> Iterator[None]:
    """Switch BatchNorm stat tracking off for a pass that runs without grad (FairScale's first forward)."""
    switched = [m for m in module.modules() if isinstance(m, _BatchNorm) and m.training and m.track_running_stats]
    for m in switched:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m in switched:
            m.track_running_stats = True
