"""``dp`` on real GPUs, in this process: one GPU, two replicas sharing one GPU, and every GPU of the machine.

They run only where CUDA is available; two of them need two or more GPUs. The CPU parity and resume runs of ``dp``
are in ``tests/integration/strategies/dp/test_dp.py``.

The in-process tests; the ones that launch processes are in ``tests/integration/strategies/dp/test_dp.py``.
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

import lightning_mgpu  # noqa: F401
from lightning_mgpu.testing.parity import ParityModule, max_abs_diff
from tests.helpers.runif import RunIf
from tests.helpers.trainer import quiet_trainer


# --------------------------------------------------------------------------- real GPUs
def _fit_on_gpus(devices: int, steps: int = 5, strategy: Any = "dp") -> tuple[dict[str, torch.Tensor], pl.Trainer]:
    # 31 samples split unevenly on any count of 2+ GPUs, so a plain mean of replica losses would fail parity.
    model = ParityModule(global_batch=31, num_samples=31 * steps)
    trainer = quiet_trainer(
        strategy=strategy,
        accelerator="gpu",
        devices=devices,
        max_steps=steps,
        use_distributed_sampler=False,
    )
    trainer.fit(model)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, trainer


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_dp_on_one_gpu_runs_single_device() -> None:
    params, trainer = _fit_on_gpus(1)
    assert trainer.num_devices == 1 and not trainer.strategy.is_data_parallel
    assert all(torch.isfinite(v).all() for v in params.values())


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_dp_replicas_sharing_one_gpu_match_one_replica() -> None:
    """DataParallel's real ``scatter``/``replicate``/``parallel_apply``/``gather`` with two replicas on ``cuda:0``
    (``device_ids=[0, 0]``): the multi-replica path on a machine with one GPU."""
    from lightning_mgpu.strategies.dp import DataParallelStrategy

    one, _ = _fit_on_gpus(1)
    shared = DataParallelStrategy(parallel_devices=[torch.device("cuda", 0)] * 2)
    two, trainer = _fit_on_gpus(1, strategy=shared)
    assert trainer.strategy.is_data_parallel and trainer.num_devices == 2
    assert trainer.strategy.parallel_devices == [torch.device("cuda", 0)] * 2
    assert max_abs_diff(one, two) < 1e-5


@pytest.mark.gpu
@RunIf(min_cuda_gpus=2)
def test_dp_on_several_gpus_matches_one_gpu(record_property: Any) -> None:
    n = torch.cuda.device_count()
    one, _ = _fit_on_gpus(1)
    for i in range(n):
        torch.cuda.reset_peak_memory_stats(i)
    start = time.perf_counter()
    many, trainer = _fit_on_gpus(n)
    seconds = time.perf_counter() - start
    assert trainer.num_devices == n and trainer.world_size == 1 and trainer.strategy.is_data_parallel
    assert max_abs_diff(one, many) < 1e-5
    peaks = [torch.cuda.max_memory_allocated(i) for i in range(n)]
    record_property("dp_peak_memory_bytes_per_gpu", peaks)
    record_property("dp_fit_seconds", seconds)
    # Reported, not asserted beyond sanity: GPU 0 holds the module, the optimizer and the gathers.
    print(f"dp on {n} GPUs: peak memory per GPU (MiB) {[round(p / 2**20, 1) for p in peaks]}")
    assert peaks[0] > 0 and all(p > 0 for p in peaks[1:])


@pytest.mark.gpu
@RunIf(min_cuda_gpus=2)
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_dp_mixed_precision_on_gpus(precision: str) -> None:
    if precision == "bf16-mixed" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    dtypes: list[torch.dtype] = []

    class Recorder(ParityModule):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            dtypes.append(self(batch[0]).dtype)
            return super().training_step(batch, batch_idx)

    model = Recorder(global_batch=16, num_samples=48)
    trainer = pl.Trainer(
        strategy="dp",
        accelerator="gpu",
        devices=2,
        precision=precision,
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        use_distributed_sampler=False,
    )
    trainer.fit(model)
    expected = torch.float16 if precision == "16-mixed" else torch.bfloat16
    # parallel_apply alone would run bf16-mixed replicas in float16.
    assert dtypes == [expected] * 6
