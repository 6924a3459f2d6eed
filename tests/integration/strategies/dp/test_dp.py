"""``dp`` checkpoints resume under the multi-process strategies, and ``dp`` on real GPUs.

The CPU tests run the harness (``tests/integration/runners/run_parity.py``): on one device in this process, on two in
fresh processes. The GPU tests run only where CUDA is available (two of them need two or more GPUs).

The tests that launch processes; the in-process ones are in ``tests/unit/strategies/dp/test_dp_gpu.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import lightning_mgpu  # noqa: F401
from lightning_mgpu.testing.parity import ParityModule, max_abs_diff
from lightning_mgpu.utilities.imports import is_available
from tests.helpers.launch import run_parity_here, run_parity_sequence
from tests.helpers.trainer import quiet_trainer


def _resume_in_process(
    ckpt: Path, steps: int, strategy: Any = "auto", accelerator: str = "cpu", devices: int = 1
) -> dict[str, torch.Tensor]:
    model = ParityModule(global_batch=32, num_samples=32 * steps)
    trainer = quiet_trainer(
        strategy=strategy, accelerator=accelerator, devices=devices, max_steps=steps, use_distributed_sampler=False
    )
    trainer.fit(model, ckpt_path=ckpt)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_dp_checkpoint_resumes_under_ddp_and_sharded(tmp_path: Path) -> None:
    # dp on one device needs no process group: the harness runs in this process. The resumes share one launch.
    dp_params = run_parity_here(tmp_path / "dp", "--strategy", "dp", "--devices", "1", "--steps", "4")[0]
    ckpt = tmp_path / "dp" / "final.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    assert not any(k.startswith("module.") for k in state)
    assert max_abs_diff(dp_params, state) == 0.0

    expected = _resume_in_process(ckpt, steps=8)
    strategies = ["ddp", *(["sharded"] if is_available("fairscale") else [])]
    resumed = run_parity_sequence(
        [(tmp_path / s, "--strategy", s, "--devices", "2", "--steps", "8", "--resume", str(ckpt)) for s in strategies]
    )
    ddp = resumed[0]
    assert json.loads((tmp_path / "ddp" / "result.json").read_text())["global_step"] == 8
    for rank, params in ddp.items():
        assert max_abs_diff(params, expected) < 1e-5, rank
    assert max_abs_diff(ddp[0], dp_params) > 1e-3  # it trained on from the dp weights

    if len(resumed) == 1:
        pytest.skip("fairscale is not installed: the sharded resume needs lightning_mgpu[sharded]")
    for rank, params in resumed[1].items():
        assert max_abs_diff(params, expected) < 1e-5, rank
