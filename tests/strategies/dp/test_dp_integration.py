"""``dp`` checkpoints resume under the multi-process strategies, and ``dp`` on real GPUs.

The CPU tests run the harness (``tests/integration/runners/run_parity.py``): on one device in this process, on two in
fresh processes. The GPU tests run only where CUDA is available (two of them need two or more GPUs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

import lightning_mgpu  # noqa: F401
from lightning_mgpu.utilities.imports import is_available
from tests.helpers.launch import max_abs_diff, run_parity_here, run_parity_sequence
from tests.helpers.models import ParityModule
from tests.helpers.runif import RunIf


def _resume_in_process(ckpt: Path, steps: int, strategy: Any = "auto", accelerator: str = "cpu", devices: int = 1) -> dict[str, torch.Tensor]:
    model = ParityModule(global_batch=32, num_samples=32 * steps)
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator=accelerator,
        devices=devices,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    trainer.fit(model, ckpt_path=ckpt)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.integration
def test_dp_checkpoint_resumes_under_ddp_and_sharded(tmp_path: Path) -> None:
    # dp on one device needs no process group: the harness runs in this process. The resumes share one launch.
    dp_params = run_parity_here(tmp_path / "dp", "--strategy", "dp", "--devices", "1", "--steps", "4")[0]
    ckpt = tmp_path / "dp" / "final.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    assert not any(k.startswith("module.") for k in state)
    assert max_abs_diff(dp_params, state) == 0.0

    expected = _resume_in_process(ckpt, steps=8)
    strategies = ["ddp", *(["sharded"] if is_available("fairscale") else [])]
    resumed = run_parity_sequence([(tmp_path / s, "--strategy", s, "--devices", "2", "--steps", "8", "--resume", str(ckpt)) for s in strategies])
    ddp = resumed[0]
    assert json.loads((tmp_path / "ddp" / "result.json").read_text())["global_step"] == 8
    for rank, params in ddp.items():
        assert max_abs_diff(params, expected) < 1e-5, rank
    assert max_abs_diff(ddp[0], dp_params) > 1e-3  # it trained on from the dp weights

    if len(resumed) == 1:
        pytest.skip("fairscale is not installed: the sharded resume needs lightning_mgpu[sharded]")
    for rank, params in resumed[1].items():
        assert max_abs_diff(params, expected) < 1e-5, rank


# --------------------------------------------------------------------------- real GPUs
def _fit_on_gpus(devices: int, steps: int = 5) -> tuple[dict[str, torch.Tensor], pl.Trainer]:
    # 31 samples split unevenly on any count of 2+ GPUs, so a plain mean of replica losses would fail parity.
    model = ParityModule(global_batch=31, num_samples=31 * steps)
    trainer = pl.Trainer(
        strategy="dp",
        accelerator="gpu",
        devices=devices,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
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
        strategy="dp", accelerator="gpu", devices=2, precision=precision, max_steps=3, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, use_distributed_sampler=False,
    )
    trainer.fit(model)
    expected = torch.float16 if precision == "16-mixed" else torch.bfloat16
    # parallel_apply alone would run bf16-mixed replicas in float16.
    assert dtypes == [expected] * 6
