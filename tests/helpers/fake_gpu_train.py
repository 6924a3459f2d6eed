"""``examples/train.py`` with the GPU monitor on fake GPUs: ``python tests/helpers/fake_gpu_train.py <train.py args>``.

The model trains on the CPU as usual; only the monitor's view is faked: NVML is :func:`tests.helpers.fake_nvml.
make_fake_pynvml`'s four GPUs, torch sees ``CUDA_VISIBLE_DEVICES=3,1``, and each rank's monitor drives
``cuda:<local rank>`` (rank 0: NVML GPU 3, rank 1: NVML GPU 1). Lightning's launcher runs this file again for the
other ranks (it re-executes ``sys.argv``), so every rank gets the same fakes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lightning_mgpu.monitoring import callback as gpu_monitor  # noqa: E402
from tests.helpers.fake_nvml import install_fake_gpus  # noqa: E402
from tests.helpers.launch import import_train_script  # noqa: E402


def main() -> None:
    patch = pytest.MonkeyPatch()  # never undone: the process ends with the run
    install_fake_gpus(patch)
    patch.setattr(gpu_monitor, "local_devices", lambda trainer: [torch.device("cuda", trainer.local_rank)])
    # Imported, not run as __main__: sys.argv[0] stays this file, which Lightning's launcher runs for the other ranks.
    import_train_script().run(sys.argv[1:])


if __name__ == "__main__":
    main()
