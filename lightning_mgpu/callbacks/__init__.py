"""Callbacks that work under every strategy.

``GPUUtilizationMonitor`` lives in :mod:`lightning_mgpu.monitoring`; it is re-exported here, where users
import callbacks from.
"""

from lightning_mgpu.callbacks.activation_checkpointing import ActivationCheckpointing  # noqa: F401
from lightning_mgpu.callbacks.clean_exit import CleanExit  # noqa: F401
from lightning_mgpu.callbacks.grad_sync import GradSyncToggle  # noqa: F401
from lightning_mgpu.callbacks.launcher_guard import LauncherGuard  # noqa: F401
from lightning_mgpu.callbacks.mixed_precision import AutoMixedPrecision  # noqa: F401
from lightning_mgpu.callbacks.rng_states import RNGStates  # noqa: F401
from lightning_mgpu.callbacks.save_on_interrupt import SaveOnInterrupt  # noqa: F401
from lightning_mgpu.callbacks.swa import LegacyStochasticWeightAveraging  # noqa: F401
from lightning_mgpu.callbacks.terminate_on_nan import TerminateOnNaN  # noqa: F401
from lightning_mgpu.callbacks.track_grad_norm import TrackGradNorm  # noqa: F401
from lightning_mgpu.callbacks.zero_grad import ZeroGradSetToNone  # noqa: F401
from lightning_mgpu.monitoring.callback import GPUUtilizationMonitor  # noqa: F401
