"""Pick the mixed-precision mode for the hardware and watch the loss scaler while training."""

from __future__ import annotations

import functools
import platform
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from typing_extensions import override

from lightning_mgpu.utilities.deprecation import moved_names
from lightning_mgpu.utilities.logging_steps import is_logging_step

_SUPPORTED_ACCELERATORS = ("auto", "cpu", "gpu", "cuda")


class AutoMixedPrecision(Callback):
    """Resolve ``precision="auto"`` for the hardware, and monitor float16 loss scaling during training.

    What Lightning 2.6 does not do: its ``precision=`` plugins autocast and scale the loss, but there is no
    ``"auto"`` precision, the loss scale and the steps the ``GradScaler`` silently skips for inf/NaN gradients
    are never reported, and ``strategy="sharded"`` gets a plain ``GradScaler``, whose inf/NaN check sees only
    the gradients of the local shard, so ranks can disagree on skipping a step.

    This callback:

    - :meth:`resolve_precision` picks ``"bf16-mixed"`` where the device computes bfloat16 natively (Ampere+
      GPUs; CPUs with AVX512-BF16 or AMX), else ``"16-mixed"`` on CUDA, else ``"32-true"``. Call it *before*
      building the ``Trainer`` and pass the result as ``Trainer(precision=...)``.
    - checks at ``setup`` that the Trainer really runs that precision (an explicit conflicting ``precision``
      or precision plugin is an error, not a silent override).
    - under ``"16-mixed"``: counts at every optimizer step the steps skipped for inf/NaN gradients, and warns,
      with the fixes, when ``max_consecutive_skips`` steps in a row are skipped. It logs ``amp/loss_scale`` (the
      scale used for the step) and ``amp/skipped_steps`` (cumulative) on the steps Lightning hands to the loggers
      (every ``log_every_n_steps``) and on the last step of an epoch or of the fit: each ``self.log`` costs about
      a millisecond of Python in Lightning 2.6, 4-5 % of a 24 ms step on an H200, and a value logged between
      those steps would only be overwritten.
    - under ``"16-mixed"`` with a strategy that shards gradients (``strategy.shards_gradients``, e.g.
      ``sharded`` on FairScale): checks that the strategy's scaler is shard-aware, so every rank skips the
      same steps, and refuses a plain one with the fix. The strategy installs that scaler itself.

    Args:
        max_consecutive_skips: warn when this many optimizer steps in a row were skipped. The scaler skips a
            few steps at the start while it backs off from its initial scale of 65536; that is normal.
        log_scale: log ``amp/loss_scale`` and ``amp/skipped_steps``.

    Raises:
        ValueError: ``max_consecutive_skips < 1``.

    Example::

        from lightning_mgpu.callbacks import AutoMixedPrecision

        amp = AutoMixedPrecision()
        trainer = Trainer(precision=amp.resolve_precision("auto"), callbacks=[amp])
    """

    def __init__(self, max_consecutive_skips: int = 10, log_scale: bool = True) -> None:
        if not isinstance(max_consecutive_skips, int) or max_consecutive_skips < 1:
            raise ValueError(f"max_consecutive_skips must be an integer >= 1, got {max_consecutive_skips!r}.")
        self.max_consecutive_skips = max_consecutive_skips
        self.log_scale = log_scale
        self.resolved: str | None = None
        self.resolved_for: str | None = None
        self.skipped_steps = 0
        self.optimizer_steps = 0
        self.consecutive_skips = 0
        self._warned_streak = False

    def resolve_precision(self, accelerator: str = "auto") -> str:
        """Pick the precision for ``accelerator`` (``"auto"``, ``"cpu"`` or ``"gpu"``) and remember it.

        Returns:
            ``"bf16-mixed"``, ``"16-mixed"`` or ``"32-true"``.

        Raises:
            ValueError: unknown accelerator.
            MisconfigurationException: ``accelerator="gpu"`` but no CUDA device is visible.
        """
        self.resolved = resolve_precision(accelerator)
        self.resolved_for = accelerator
        return self.resolved

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        actual = str(trainer.precision)
        if self.resolved is not None and actual != self.resolved:
            raise MisconfigurationException(
                f"AutoMixedPrecision resolved precision={self.resolved!r} for accelerator={self.resolved_for!r},"
                f" but the Trainer runs precision={actual!r} ({type(trainer.precision_plugin).__name__}), set by"
                " an explicit `Trainer(precision=...)`, a precision plugin in `plugins=[...]`, or a different"
                " accelerator. Build the Trainer with `precision=amp.resolve_precision(accelerator)` and the"
                " same accelerator, or remove AutoMixedPrecision to keep your explicit choice."
            )
        if self.resolved is None and not isinstance(trainer.precision_plugin, MixedPrecision):
            raise MisconfigurationException(
                f"AutoMixedPrecision was added but no precision was resolved, and the Trainer runs"
                f" precision={actual!r}, which it cannot manage. Call `precision = amp.resolve_precision(accelerator)`"
                " before building the Trainer and pass `Trainer(precision=precision)`, or use"
                " precision='16-mixed' / 'bf16-mixed'."
            )

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After strategy.setup, which installs a shard-aware scaler where gradients are sharded.
        scaler = _scaler_of(trainer)
        if scaler is not None and _shards_gradients(trainer.strategy) and not _is_shard_aware(scaler):
            raise MisconfigurationException(
                f"AutoMixedPrecision: {type(trainer.strategy).__name__} keeps only a shard of the gradients on each"
                f" rank, but the loss scaler is a plain {type(scaler).__name__}: ranks would disagree on skipping a"
                " step after inf/NaN and silently diverge. Use the strategy's own precision plugin (pass"
                " `precision='16-mixed'` instead of a hand-built plugin), or a scaler that all-reduces its inf/NaN"
                " flag such as `lightning_mgpu.plugins.ShardAwareGradScaler`."
            )

    @override
    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        scaler = _scaler_of(trainer)
        if scaler is None:
            return
        # Lightning unscales just before this hook, so the scaler already knows whether step() will be skipped.
        found_inf = _found_inf(scaler, optimizer)
        if found_inf is None:
            return  # an optimizer that unscales inside step() (fused); nothing to read yet
        self.optimizer_steps += 1
        if found_inf:
            self.skipped_steps += 1
            self.consecutive_skips += 1
        else:
            self.consecutive_skips, self._warned_streak = 0, False
        scale = float(scaler.get_scale())
        if self.log_scale and is_logging_step(trainer):
            pl_module.log("amp/loss_scale", scale, on_step=True, on_epoch=False)
            pl_module.log("amp/skipped_steps", float(self.skipped_steps), on_step=True, on_epoch=False)
        if self.consecutive_skips >= self.max_consecutive_skips and not self._warned_streak:
            self._warned_streak = True
            rank_zero_warn(
                _skip_streak_message(self.consecutive_skips, scale, self.skipped_steps, self.optimizer_steps)
            )

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"skipped_steps": self.skipped_steps, "optimizer_steps": self.optimizer_steps, "resolved": self.resolved}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped_steps = int(state_dict.get("skipped_steps", 0))
        self.optimizer_steps = int(state_dict.get("optimizer_steps", 0))


def resolve_precision(accelerator: str = "auto") -> str:
    """``"bf16-mixed"`` where bfloat16 is fast, else ``"16-mixed"`` on CUDA, else ``"32-true"``.

    Raises:
        ValueError: unknown accelerator.
        MisconfigurationException: ``accelerator="gpu"`` but no CUDA device is visible.
    """
    if accelerator not in _SUPPORTED_ACCELERATORS:
        raise ValueError(f"accelerator must be one of {_SUPPORTED_ACCELERATORS}, got {accelerator!r}.")
    cuda = torch.cuda.is_available()
    if accelerator in ("gpu", "cuda") and not cuda:
        raise MisconfigurationException(
            f"AutoMixedPrecision.resolve_precision(accelerator={accelerator!r}): no CUDA device is visible"
            " (check CUDA_VISIBLE_DEVICES and the driver). Use accelerator='cpu' or 'auto'."
        )
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and cuda):
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    if accelerator == "auto" and _mps_available():
        rank_zero_info("AutoMixedPrecision: Apple MPS detected; using precision='32-true'.")
        return "32-true"
    if cpu_has_fast_bf16():
        return "bf16-mixed"
    rank_zero_info(
        "AutoMixedPrecision: this CPU has no native bfloat16 (AVX512-BF16/AMX) and float16 autocast on CPU"
        " gains nothing, so precision='32-true'."
    )
    return "32-true"


@functools.lru_cache(maxsize=None)
def cpu_has_fast_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU computes bfloat16 natively (x86 AVX512-BF16 / AMX-BF16, ARM BF16), from ``cpuinfo``.

    Only Linux exposes the flags; elsewhere this answers ``False`` (so ``"auto"`` picks ``"32-true"``).
    """
    path = Path(cpuinfo)
    if platform.system() != "Linux" or not path.is_file():
        return False
    flags: set[str] = set()
    for line in path.read_text(errors="ignore").splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[-1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def _scaler_of(trainer: pl.Trainer) -> torch.amp.GradScaler | None:
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    return scaler if scaler is not None and scaler.is_enabled() else None


def _found_inf(scaler: torch.amp.GradScaler, optimizer: Any) -> bool | None:
    """Whether the unscaled gradients of ``optimizer`` hold inf/NaN; ``None`` if not unscaled yet."""
    state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer))
    per_device = state.get("found_inf_per_device") if state else None
    if not per_device:
        return None
    return bool(sum(float(v.item()) for v in per_device.values()))


def _shards_gradients(strategy: Any) -> bool:
    # A capability, not a class: any strategy whose ranks each hold a shard of the gradients says so.
    return bool(getattr(strategy, "shards_gradients", False))


def _is_shard_aware(scaler: Any) -> bool:
    return bool(getattr(scaler, "shard_aware", False))


def _skip_streak_message(streak: int, scale: float, skipped: int, steps: int) -> str:
    cause = (
        f" The loss scale has collapsed to {scale:g}, which means NaN rather than overflow: look for NaN in"
        " the inputs, a log/sqrt/division of zero, or a loss that is NaN in float16."
        if scale < 1.0
        else f" The loss scale is now {scale:g}."
    )
    return (
        f"AutoMixedPrecision: the last {streak} optimizer steps were all skipped because the gradients held"
        f" inf/NaN under precision='16-mixed' ({skipped} of {steps} steps skipped so far), so the model is not"
        f" training.{cause} Fixes: compute the loss in float32 (outside autocast, or `.float()` the logits);"
        " lower the learning rate or set `Trainer(gradient_clip_val=...)`; or use precision='bf16-mixed'"
        " (float32 range, no loss scaling) where supported, or '32-true'."
    )


__getattr__ = moved_names(__name__)  # names that moved out, with a DeprecationWarning (CHANGELOG.md)
