"""``python -m benchmarks.run`` end to end, on real benchmark processes at their dry-run size (timings are not checked).

The tests that launch processes; the in-process ones are in ``tests/unit/benchmarks/test_run.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import run as run_module
from tests.helpers.launch import REPO_ROOT, run, run_python

RUN = ["-m", "benchmarks.run"]


def test_list_names_every_benchmark_and_its_suites() -> None:
    out = run_python([*RUN, "--list"], timeout=60).stdout
    for name in (
        "ddp",
        "sharded",
        "horovod",
        "dp",
        "parity",
        "scaling",
        "gpu_monitor",
        "amp",
        "activation_checkpointing",
        "preprocess",
        "launchers",
    ):
        assert name in out
    assert "[strategies, memory]" in out
    assert "amp          [callbacks]" in out and "(GPU only: run.py --gpu)" in out.split("amp ")[1].splitlines()[0]


def test_an_unknown_suite_is_refused_with_the_choices() -> None:
    proc = run_python([*RUN, "--suite", "speed"], timeout=60, expect=2)  # argparse's usage error
    assert "invalid choice: 'speed'" in proc.stderr


@pytest.mark.extended  # the benchmark's own run: before a benchmark session, with --extended
@pytest.mark.timeout(600)
def test_quick_dry_run_writes_report_json_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = run_python(
        [*RUN, "--quick", "--dry-run", "--only", "dp,ddp,scaling,amp,activation_checkpointing", "--out", str(out)],
        timeout=500,
    )
    assert "ddp (Lightning) / raw torch DDP loop" in proc.stdout  # the terminal table
    raw = json.loads((out / "results.json").read_text())
    by_name = {b["name"]: b for b in raw["benchmarks"]}
    assert {n: b["status"] for n, b in by_name.items()} == dict.fromkeys(
        ("ddp", "dp", "scaling", "amp", "activation_checkpointing"), "ok"
    )
    for name in ("ddp", "dp", "activation_checkpointing"):
        assert by_name[name]["summaries"] and all("median" in s for s in by_name[name]["summaries"])
    figures = {label: f["value"] for b in raw["benchmarks"] for label, f in b["result"]["figures"].items()}
    assert any(label.startswith("communication efficiency") for label in figures)
    # bench_ddp's decomposition arms ran (each trained exactly as plain DDP, or the benchmark would have failed).
    assert {"raw_no_comm", "raw_blocking", "raw_bucket_view"} <= set(by_name["ddp"]["result"]["arms"])
    assert any(label.startswith("DDP's bookkeeping without communication") for label in figures)
    assert any(label.startswith("ddp - raw DDP, per step, in the step's body") for label in figures)
    assert any("peak activation memory saved" in label for label in figures)
    # bench_amp's script on the CPU: Lightning + AutoMixedPrecision under fp16 (a real GradScaler) against the raw loop.
    assert "fp16: Lightning + AutoMixedPrecision / raw autocast loop" in [
        s["label"] for s in by_name["amp"]["summaries"]
    ]
    assert figures["fp16: achieved TFLOPS"] > 0
    # The callback checkpoints exactly what torch.utils.checkpoint by hand does: the same peak activation memory.
    memory = by_name["activation_checkpointing"]["result"]["memory"]
    assert memory["mlp-cpu/every_k=1"] == memory["mlp-cpu/torch"] < memory["mlp-cpu/none"]
    labels = [s["label"] for s in by_name["activation_checkpointing"]["summaries"]]
    assert "mlp-cpu: every_k=1 / torch.utils.checkpoint by hand, step time" in labels
    text = (out / "report.md").read_text()
    assert "## ddp" in text and "## dp" in text and "## scaling" in text and "Versions:" in text
    assert (out / "ddp_step_times.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "activation_checkpointing_memory.png").read_bytes()[:4] == b"\x89PNG"
    # bench_scaling launched one and two real ranks: its efficiency and its scaling curve.
    assert [s["label"] for s in by_name["scaling"]["summaries"]] == [
        "ddp: scaling efficiency at 2 devices (step at 1 / step at 2)"
    ]
    assert set(by_name["scaling"]["result"]["scaling"]["samples_per_s"]["ddp"]) == {"1", "2"}
    assert (out / "scaling_scaling.png").read_bytes()[:4] == b"\x89PNG"

    # --update reruns one benchmark (a real run, from run.py's main in this process) and replaces its section; the
    # others stay as they were.
    run = run_module
    with pytest.raises(SystemExit, match="it is a dry run and this one is full"):
        run.main(["--only", "activation_checkpointing", "--update", str(out)])
    assert run.main(["--dry-run", "--only", "activation_checkpointing", "--update", str(out)]) == 0
    updated = json.loads((out / "results.json").read_text())
    after = {b["name"]: b for b in updated["benchmarks"]}
    assert list(after) == list(by_name)  # the registry's order: nothing added, nothing lost
    rerun = after["activation_checkpointing"]
    assert rerun["status"] == "ok" and rerun["result"]["arms"] != by_name["activation_checkpointing"]["result"]["arms"]
    assert all(after[n] == by_name[n] for n in ("ddp", "dp", "scaling", "amp"))
    assert (
        "whose sections replace those of the runs before it" in updated["command"] and "--update" in updated["command"]
    )
    assert "## activation_checkpointing" in (out / "report.md").read_text()


@pytest.mark.timeout(120)
def test_a_benchmark_that_fails_is_reported_as_failed(tmp_path: Path) -> None:
    broken = run_module.Benchmark(
        "broken", ("strategies",), "bench_dp.py", "a benchmark given a bad argument", {"dry": ["--rounds", "x"]}
    )
    run = run_module.run_one(broken, "dry", tmp_path, 0)
    assert run.status == "failed" and "exit code 2" in run.error and "invalid int value: 'x'" in run.error


def test_gpu_check_without_a_gpu_says_what_it_skipped() -> None:
    proc = run(["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh")], env={"CUDA_VISIBLE_DEVICES": ""}, timeout=600)
    assert "skipped: the gpu-marked tests and the GPU suite" in proc.stdout


def test_gpu_variants_need_a_gpu() -> None:
    proc = run_python([*RUN, "--gpu", "--only", "dp"], timeout=60, expect=1, env={"CUDA_VISIBLE_DEVICES": ""})
    assert "no CUDA GPU is visible here" in proc.stderr
