"""GPU-utilisation monitoring: the callback and everything it is made of.

``callback.py`` holds :class:`GPUUtilizationMonitor`; ``samplers.py`` the background samplers (NVML, psutil);
``step_timing.py`` step timing and host-sync detection; ``keys.py`` the metric-key layout every reader and
logger shares; ``diagnosis.py`` the "why is utilisation low" verdicts; ``timeline.py`` every sample with its phase,
and ``export/`` the time line into the Trainer's loggers (MLflow, TensorBoard, CSV, Neptune).
"""

from lightning_mgpu.monitoring.callback import GPUUtilizationMonitor
from lightning_mgpu.monitoring.diagnosis import Diagnosis, DiagnosisThresholds, diagnose

__all__ = ["Diagnosis", "DiagnosisThresholds", "GPUUtilizationMonitor", "diagnose"]
