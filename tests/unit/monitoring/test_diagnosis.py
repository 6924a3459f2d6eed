"""Bottleneck verdicts, advice, table and JSON (pure functions), and the metric key schema."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lightning_mgpu.monitoring import keys as K
from lightning_mgpu.monitoring.diagnosis import (
    COMPUTE_BOUND,
    INPUT_BOUND,
    THROTTLED,
    VERDICTS,
    Diagnosis,
    DiagnosisThresholds,
    diagnose,
    diagnoses_to_json,
    format_table,
    load_diagnoses,
    per_device_from_metrics,
    write_diagnoses,
)


def verdict(metrics: dict[str, float], **context) -> Diagnosis:
    (d,) = diagnose({"rank0": metrics}, context=context)
    return d


# --------------------------------------------------------------------------- verdicts
def test_high_data_wait_is_input_bound_with_loader_advice() -> None:
    d = verdict(
        {"data_wait_pct": 45.0, "gpu_util_pct": 30.0, "step_ms": 12.0},
        num_workers=0,
        accelerator="cuda",
        pin_memory=False,
    )
    assert d.verdict == "input-bound"
    text = " ".join(d.advice)
    assert "num_workers" in text and "pin_memory=True" in text and "lightning_mgpu.data" in text
    assert d.evidence == {"data_wait_pct": 45.0, "gpu_util_pct": 30.0, "step_ms": 12.0}


def test_input_advice_asks_only_for_what_the_loader_does_not_do() -> None:
    facts = {"data_wait_pct": 60.0, "gpu_util_pct": 12.0}
    kept = verdict(facts, num_workers=4, accelerator="cuda", pin_memory=True, persistent_workers=True).advice[0]
    assert (
        kept == f"raise DataLoader num_workers above 4 (up to the CPU cores per device; this host has {os.cpu_count()})"
    )
    fresh = verdict(facts, num_workers=4, accelerator="cuda", pin_memory=True, persistent_workers=False).advice[0]
    assert fresh.endswith("and set persistent_workers=True")


def test_data_wait_with_a_busy_gpu_is_not_input_bound() -> None:
    # With CUDA the host waits for data while queued kernels still run: the GPU was never starved.
    assert verdict({"data_wait_pct": 45.0, "gpu_util_pct": 97.0}).verdict == "compute-bound"


def test_pin_memory_advice_only_where_it_is_missing_on_cuda() -> None:
    assert "pin_memory" not in " ".join(
        verdict({"data_wait_pct": 60.0}, accelerator="cuda", pin_memory=True, num_workers=4).advice
    )
    assert "pin_memory" not in " ".join(verdict({"data_wait_pct": 60.0}, accelerator="cpu", num_workers=4).advice)
    assert "above 4" in " ".join(verdict({"data_wait_pct": 60.0}, accelerator="cpu", num_workers=4).advice)


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({"comm_pct": 40.0}, "communication-bound"),
        ({"synced_step_ms": 90.0, "unsynced_step_ms": 30.0}, "communication-bound"),  # 3x slower when syncing
        ({"synced_step_ms": 33.0, "unsynced_step_ms": 30.0}, "compute-bound"),  # 1.1x: just the optimizer step
        ({"synced_step_ms": 1.2, "unsynced_step_ms": 0.4}, "compute-bound"),  # 3x but 0.8 ms: timer noise
    ],
)
def test_communication_bound(metrics: dict[str, float], expected: str) -> None:
    assert verdict(metrics).verdict == expected


def test_dp_gets_ddp_advice() -> None:
    d = verdict({"comm_pct": 50.0}, strategy="dp")
    assert d.verdict == "communication-bound" and "strategy='ddp' instead of 'dp'" in d.advice[0]
    assert "instead of 'dp'" not in " ".join(verdict({"comm_pct": 50.0}, strategy="ddp").advice)


def test_low_gpu_utilisation_without_a_cause_is_unexplained() -> None:
    d = verdict(
        {"gpu_util_pct": 25.0, "data_wait_pct": 2.0, "step_ms": 4.0, "host_syncs_per_step": 3.0}, precision="32-true"
    )
    assert d.verdict == "low-utilisation-unexplained"
    text = " ".join(d.advice)
    assert "bigger per-device batch" in text and "4.0 ms" in text
    assert "3.0 host-device syncs" in text and "mixed precision" in text


def test_low_cpu_utilisation_is_not_judged() -> None:
    # A CPU process using fewer cores than its torch threads is not idle: only the timings count.
    assert verdict({"cpu_util_pct": 20.0, "data_wait_pct": 1.0}).verdict == "compute-bound"


def test_compute_bound_vs_healthy() -> None:
    fp32 = verdict({"gpu_util_pct": 98.0, "data_wait_pct": 1.0, "mfu": 0.12}, precision="32-true", accelerator="cuda")
    assert fp32.verdict == "compute-bound" and "mixed precision" in fp32.advice[0]
    bf16 = verdict({"gpu_util_pct": 98.0, "mfu": 0.12}, precision="bf16-mixed", accelerator="cuda")
    assert bf16.verdict == "compute-bound" and not any("mixed precision" in a for a in bf16.advice)
    assert verdict({"gpu_util_pct": 98.0, "mfu": 0.55}).verdict == "healthy"


def test_input_check_wins_over_communication_and_nan_is_ignored() -> None:
    d = verdict({"data_wait_pct": 50.0, "comm_pct": 50.0, "gpu_util_pct": float("nan"), "step_ms": None})  # type: ignore[dict-item]
    assert d.verdict == "input-bound" and "gpu_util_pct" not in d.evidence and "step_ms" not in d.evidence


def test_thresholds_move_the_verdict_and_are_validated() -> None:
    m = {"rank0": {"data_wait_pct": 15.0}}
    assert diagnose(m)[0].verdict == "compute-bound"
    assert diagnose(m, DiagnosisThresholds(data_wait_pct=10.0))[0].verdict == "input-bound"
    with pytest.raises(ValueError, match="percentage"):
        DiagnosisThresholds(data_wait_pct=150.0)
    with pytest.raises(ValueError, match="sync_ratio"):
        DiagnosisThresholds(sync_ratio=0.5)


def test_every_device_keeps_its_order_and_verdicts_are_known() -> None:
    per_device = {f"rank{r}": {"data_wait_pct": 40.0 if r % 2 else 1.0} for r in range(4)}
    ds = diagnose(per_device)
    assert [d.device for d in ds] == ["rank0", "rank1", "rank2", "rank3"]
    assert [d.verdict for d in ds] == ["compute-bound", "input-bound", "compute-bound", "input-bound"]
    assert all(d.verdict in VERDICTS for d in ds)


# --------------------------------------------------------------------------- table and JSON
def test_format_table_shows_numbers_and_groups_advice() -> None:
    ds = diagnose(
        {
            "rank0": {"data_wait_pct": 62.5, "gpu_util_pct": 31.0, "step_ms": 4.25, "samples_per_sec": 812.0},
            "rank1": {"data_wait_pct": 61.0, "gpu_util_pct": 29.0},
            "rank2": {"gpu_util_pct": 97.0, "mfu": 0.5},
        }
    )
    table = format_table(ds)
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["device", "verdict"]
    row0 = next(line for line in lines if line.startswith("rank0 "))
    assert "input-bound" in row0 and "62.5" in row0 and "31" in row0 and "4.2" in row0 and "812.0" in row0
    assert "50.0" in next(line for line in lines if line.startswith("rank2 "))  # MFU in percent
    assert "rank0, rank1: input-bound" in table  # same verdict and advice: one block
    assert "rank2: healthy" in table
    assert format_table([]) == "(no devices to diagnose)"


def test_json_round_trip(tmp_path: Path) -> None:
    ds = diagnose({"rank0": {"data_wait_pct": 70.0}, "rank1": {"comm_pct": 30.0}})
    path = write_diagnoses(
        tmp_path / "logs" / "diagnosis.json", ds, step=42, sync_sites=[["train.py:10 in step: loss.item()", 3]]
    )
    loaded, meta = load_diagnoses(path)
    assert loaded == ds
    assert meta == {"version": 1, "step": 42, "sync_sites": [["train.py:10 in step: loss.item()", 3]]}
    assert load_diagnoses(diagnoses_to_json(ds))[0] == ds
    assert not list((tmp_path / "logs").glob(".*tmp"))  # the temporary file was renamed into place
    with pytest.raises(ValueError, match="not a diagnosis document"):
        load_diagnoses('{"x": 1}')


# --------------------------------------------------------------------------- key schema
def test_metric_keys_round_trip() -> None:
    assert K.metric_key(K.GPU, K.device_label(1), K.UTIL_PCT) == "gpu/rank1/util_pct"
    assert K.metric_key(K.GPU, K.device_label(0, 3), K.POWER_W) == "gpu/rank0_dev3/power_w"
    assert K.metric_key(K.THROUGHPUT, None, K.MFU) == "throughput/mfu"
    for key in (
        "gpu/rank12/util_pct_max",
        "cpu/rank0/rss_gb",
        "time/rank0_dev1/data_wait_pct",
        "throughput/samples_per_sec",
    ):
        group, device, name = K.parse_metric_key(key)
        assert K.metric_key(group, device, name) == key
    for other in ("train_loss", "gpu/node0/util_pct", "gpu/rank0/", "gpu", "epoch/rank0/x", "gpu/rank0/a/b"):
        assert K.parse_metric_key(other) is None, other
    assert K.parse_device_label("rank0_dev1") == (0, 1) and K.parse_device_label("rank7") == (7, None)
    with pytest.raises(ValueError, match="unknown metric group"):
        K.metric_key("disk", "rank0", "x")
    with pytest.raises(ValueError, match="device label"):
        K.metric_key(K.GPU, "gpu0", "x")


def test_logged_metrics_feed_diagnose() -> None:
    logged = {
        "gpu/rank0/util_pct": 22.0,
        "cpu/rank0/util_pct": 90.0,
        "time/rank0/data_wait_pct": 55.0,
        "throughput/rank0/samples_per_sec": 100.0,
        "gpu/rank1/util_pct": 95.0,
        "time/rank1/data_wait_pct": 2.0,
        "throughput/samples_per_sec": 300.0,
        "train_loss": 0.3,
        "epoch": 1,
    }
    per_device = per_device_from_metrics(logged)
    assert per_device == {
        "rank0": {"gpu_util_pct": 22.0, "cpu_util_pct": 90.0, "data_wait_pct": 55.0, "samples_per_sec": 100.0},
        "rank1": {"gpu_util_pct": 95.0, "data_wait_pct": 2.0},
    }
    assert [d.verdict for d in diagnose(per_device)] == ["input-bound", "compute-bound"]


def test_a_gpu_held_back_by_power_or_heat_is_named_throttled_with_the_cause() -> None:
    busy = {"gpu_util_pct": 97.0, "data_wait_pct": 1.0, "step_ms": 80.0}
    power, heat, below, starved = diagnose(
        {
            "rank0": {**busy, "gpu_throttle_power_pct": 45.0, "gpu_throttle_thermal_pct": 5.0},
            "rank1": {**busy, "gpu_throttle_thermal_pct": 60.0, "gpu_temp_c": 88.0},
            "rank2": {**busy, "gpu_throttle_power_pct": 10.0},  # under the 20 % threshold
            "rank3": {**busy, "data_wait_pct": 70.0, "gpu_util_pct": 30.0, "gpu_throttle_power_pct": 90.0},
        }
    )
    assert power.verdict == THROTTLED and "power cap in 45% of the samples" in power.advice[0]
    assert "nvidia-smi -q -d POWER,PERFORMANCE" in power.advice[0]
    assert heat.verdict == THROTTLED and "heat in 60% of the samples (up to 88 C)" in heat.advice[0]
    assert below.verdict == COMPUTE_BOUND
    assert starved.verdict == INPUT_BOUND  # waiting for data comes first: the clocks do not matter then
    assert diagnose({"r": {**busy, "gpu_throttle_hw_slowdown_pct": 25.0}})[0].verdict == THROTTLED
    assert diagnose({"r": busy}, DiagnosisThresholds(throttle_pct=0.0))[0].verdict == COMPUTE_BOUND  # nothing read
    with pytest.raises(ValueError, match="throttle_pct is a percentage"):
        DiagnosisThresholds(throttle_pct=120.0)


def test_uncorrected_ecc_errors_are_named_whatever_the_verdict() -> None:
    (d,) = diagnose({"rank0": {"gpu_util_pct": 97.0, "gpu_ecc_errors": 3.0}})
    assert d.verdict == COMPUTE_BOUND and any("3 uncorrected ECC error(s)" in a for a in d.advice)
    (clean,) = diagnose({"rank0": {"gpu_util_pct": 97.0, "gpu_ecc_errors": 0.0}})
    assert not any("ECC" in a for a in clean.advice)
