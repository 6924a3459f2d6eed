"""``dense_peak_flops``: the MFU denominator, with the H200 that Lightning's table misses (names faked: no GPU here)."""

from __future__ import annotations

import pytest
import torch

from lightning_mgpu.monitoring.peak_flops import dense_peak_flops

CUDA0 = torch.device("cuda", 0)  # only its type is read before the (faked) name


@pytest.fixture
def gpu_named(monkeypatch: pytest.MonkeyPatch):
    def name(value: str) -> None:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: value)

    return name


def test_h200_gets_its_dense_figures_where_lightning_finds_none(gpu_named) -> None:
    from lightning.fabric.utilities.throughput import get_available_flops

    gpu_named("NVIDIA H200")
    with pytest.warns(UserWarning, match="FLOPs not found"):
        assert get_available_flops(CUDA0, torch.bfloat16) is None  # the gap this module fills
    assert dense_peak_flops(CUDA0, torch.bfloat16) == dense_peak_flops(CUDA0, torch.float16) == 989.4e12
    gpu_named("NVIDIA H200 NVL")
    assert dense_peak_flops(CUDA0, torch.bfloat16) == 835.5e12


def test_float32_means_tf32_where_matmul_precision_allows_it(gpu_named) -> None:
    gpu_named("NVIDIA H200")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert dense_peak_flops(CUDA0, torch.float32) == 66.9e12
        torch.set_float32_matmul_precision("high")
        assert dense_peak_flops(CUDA0, torch.float32) == 494.7e12
    finally:
        torch.set_float32_matmul_precision(before)


def test_other_gpus_use_lightnings_table_and_the_cpu_has_none(gpu_named) -> None:
    gpu_named("NVIDIA H100 80GB HBM3")
    assert dense_peak_flops(CUDA0, torch.bfloat16) == 989.4e12  # Lightning's "h100 sxm", dense already
    gpu_named("NVIDIA A100-SXM4-80GB")
    assert dense_peak_flops(CUDA0, torch.bfloat16) == 312e12
    assert dense_peak_flops(torch.device("cpu"), torch.bfloat16) is None


def test_one_h100_nvl_board_gets_its_dense_figure_not_the_pairs(gpu_named) -> None:
    from lightning.fabric.utilities.throughput import get_available_flops

    gpu_named("NVIDIA H100 NVL")
    assert get_available_flops(CUDA0, torch.bfloat16) == 1978.8e12  # Lightning's: the first datasheet's two boards
    assert dense_peak_flops(CUDA0, torch.bfloat16) == 835.5e12


def test_the_peak_is_named_with_its_dtype(gpu_named) -> None:
    from lightning_mgpu.monitoring.peak_flops import peak_phrase

    gpu_named("NVIDIA H100 80GB HBM3")
    assert peak_phrase(dense_peak_flops(CUDA0, torch.bfloat16)) == "dense bfloat16 peak 989.4 TFLOP/s"
    assert peak_phrase(dense_peak_flops(torch.device("cpu"), torch.float16), torch.float16) == (
        "no known float16 peak (pass the peak yourself for MFU)"
    )
