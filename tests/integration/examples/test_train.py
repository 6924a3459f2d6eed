"""``examples/train.py``: the main job.

The tests that launch processes; the in-process ones are in ``tests/unit/examples/test_train.py``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from lightning_mgpu.checkpoint.io import load_state_dict
from lightning_mgpu.demos import ImageClassifier
from tests.helpers.launch import TRAIN, run_python


def test_default_run_reaches_target_and_resumes_under_ddp_spawn(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_python([TRAIN, "--output-dir", str(out)], timeout=420)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy"] == "ddp" and summary["world_size"] == 2
    assert summary["effective_batch_size"] == 32 * 2
    assert summary["val_acc"] >= 0.95, summary
    assert summary["train_samples_per_sec"] > 0 and summary["wall_seconds"] > 0
    # Only rank 0 prints the effective batch and the summary.
    assert proc.stdout.count("effective batch = 32 per device x 2 devices x 1 nodes x 1 accumulation = 64") == 1
    assert proc.stdout.count('"effective_batch_size"') == 1

    ckpt = torch.load(summary["last_checkpoint_path"], map_location="cpu", weights_only=False)
    assert not any(k.startswith("module.") for k in ckpt["state_dict"])
    model = ImageClassifier()
    model.load_state_dict(ckpt["state_dict"])  # plain keys load with torch's own loader
    load_state_dict(ImageClassifier(), summary["checkpoint_path"])

    # Resume the ddp checkpoint under ddp_spawn for one more epoch.
    steps = summary["global_step"]
    epochs = steps // 23
    resumed = tmp_path / "resumed"
    run_python(
        [
            TRAIN,
            "--strategy",
            "ddp_spawn",
            "--ckpt-path",
            summary["last_checkpoint_path"],
            "--max-epochs",
            str(epochs + 1),
            "--output-dir",
            str(resumed),
            "--logger",
            "none",
        ],
        timeout=420,
    )
    again = json.loads((resumed / "summary.json").read_text())
    assert again["strategy"] == "ddp_spawn" and again["global_step"] == steps + steps // epochs
    assert again["val_acc"] >= 0.95


def test_sharded_fsdp2_spawn_hands_its_weights_back_with_clean_exit(tmp_path: Path) -> None:
    """train.py adds CleanExit, whose teardown ended the group in a spawned worker; FSDP2's spawn launcher gathers the
    shards after it (a collective), which then failed ("Could not resolve the process group registered under the name
    0"). The launching process gets the trained weights and writes the summary."""
    out = tmp_path / "run"
    run_python(
        [TRAIN, "--strategy", "sharded_fsdp2_spawn", "--max-epochs", "1", "--output-dir", str(out), "--logger", "none"],
        timeout=300,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategy"] == "sharded_fsdp2_spawn" and summary["world_size"] == 2
    assert summary["val_acc"] > 0.5, summary
    load_state_dict(ImageClassifier(), summary["last_checkpoint_path"])  # the sharded folder, read whole


def test_scale_lr_and_accumulation_are_reported(tmp_path: Path) -> None:
    out = tmp_path / "acc"
    proc = run_python(
        [
            TRAIN,
            "--strategy",
            "ddp_spawn",
            "--accumulate-grad-batches",
            "2",
            "--scale-lr",
            "--lr",
            "0.01",
            "--max-steps",
            "3",
            "--output-dir",
            str(out),
            "--logger",
            "none",
        ],
        timeout=300,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["effective_batch_size"] == 32 * 2 * 2 and summary["global_step"] == 3
    assert summary["lr"] == pytest.approx(0.04)
    assert "(--lr 0.01 x 4, --scale-lr)" in proc.stdout


def test_all_callback_flags_together_under_ddp(tmp_path: Path) -> None:
    """Every lightning_mgpu callback flag in one short ddp run; the monitor logs both ranks through the CSV logger, and
    no deprecation warning comes from our code."""
    from lightning_mgpu.callbacks.mixed_precision import resolve_precision

    out = tmp_path / "callbacks"
    proc = run_python(
        [
            TRAIN,
            "--strategy",
            "ddp",
            "--devices",
            "2",
            "--max-steps",
            "6",
            "--max-epochs",
            "1",
            "--activation-checkpointing",
            "features.*",
            "--precision",
            "auto",
            "--zero-grad-set-to-none",
            "--grad-sync-toggle",
            "--accumulate-grad-batches",
            "2",
            "--gpu-monitor",
            "--output-dir",
            str(out),
        ],
        timeout=300,
        env={"PYTHONWARNINGS": "default::DeprecationWarning"},
    )
    # The monitor's per-window gather once went through torch.distributed.nn.functional.all_gather, which torch 2.13
    # deprecates: every `train.py --gpu-monitor` run printed the warning.
    text = proc.stdout + proc.stderr
    assert "torch.distributed.nn.functional" not in text, text[-3000:]
    ours = [line for line in text.splitlines() if "lightning_mgpu" in line and "eprecat" in line]
    assert ours == [], ours
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_step"] == 6
    assert summary["effective_batch_size"] == 32 * 2 * 2
    assert summary["precision"] == resolve_precision("auto")  # what this machine resolves "auto" to
    assert summary["train_samples_per_sec"] > 0
    # The real module names of ImageClassifier.features; the in-place ReLUs are left alone.
    assert "5 module(s): features.0, features.1, features.3, features.4, features.6" in proc.stderr + proc.stdout

    with open(out / "logs" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    logged = {k for r in rows for k, v in r.items() if v not in ("", None)}
    for r in (0, 1):
        for key in (
            f"cpu/rank{r}/util_pct",
            f"time/rank{r}/data_wait_pct",
            f"time/rank{r}/step_ms",
            f"time/rank{r}/synced_step_ms",
            f"throughput/rank{r}/samples_per_sec",
        ):
            assert key in logged, f"{key} missing; logged: {sorted(logged)}"
    assert (out / "logs" / "version_0" / "diagnosis.json").is_file()


@pytest.mark.extended  # the preprocess backends: tests/integration/data/; --preprocess ray: test_ray_train.py
def test_preprocess_with_processes_under_ddp(tmp_path: Path) -> None:
    out = tmp_path / "pre"
    run_python(
        [
            TRAIN,
            "--preprocess",
            "processes",
            "--strategy",
            "ddp",
            "--devices",
            "2",
            "--max-epochs",
            "1",
            "--logger",
            "none",
            "--output-dir",
            str(out),
        ],
        timeout=300,
    )
    for split, n in (("train", 1438), ("val", 359)):  # digits: 1797 samples, 20 % held out
        manifest = json.loads((out / "cache" / split / "manifest.json").read_text())
        assert manifest["num_samples"] == n and manifest["backend"] == "processes", manifest
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_step"] == 23
    assert summary["val_acc"] is not None and summary["val_acc"] > 0.5, summary  # chance is 0.1


#: Runs train.py as `python train.py ARGS` does, and reports on exit which heavy packages it had imported by then.
_WATCHED = (
    "import atexit, runpy, sys\n"
    "heavy = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'pytorch_lightning'})\n"
    "atexit.register(lambda: sys.stderr.write(f'HEAVY={heavy()}\\n'))\n"
    "sys.argv = [sys.argv[1], *sys.argv[2:]]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


@pytest.mark.parametrize(
    ("argv", "says", "may_import"),
    [
        (["--devices", "0"], "--devices must be >= 1", []),
        (["--bogus"], "unrecognized arguments: --bogus", []),
        # The four that once reached Lightning and failed with a traceback: now refused by the script itself.
        (["--devices", "-1"], "--devices -1 means every GPU, and this run is on the CPU", ["torch"]),
        (["--devices", "0,1"], "--devices 0,1 picks GPUs by index, and this run is on the CPU", ["torch"]),
        (["--accelerator", "gpu"], "--accelerator gpu: no CUDA GPU is visible here", ["torch"]),
        (["--output-dir", "/proc/lightning_mgpu_x"], "--output-dir '/proc/lightning_mgpu_x' cannot be written", []),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and str(v[0]).startswith("--") else None,
)
def test_bad_input_exits_2_with_one_line_before_lightning_is_imported(
    argv: list[str], says: str, may_import: list[str]
) -> None:
    proc = run_python(["-c", _WATCHED, str(TRAIN), *argv], timeout=120, expect=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("train.py: error: "), proc.stderr
    assert says in lines[0] and "Traceback" not in proc.stderr
    assert lines[1] == f"HEAVY={may_import}", lines[1]  # never Lightning: parsing comes first


def test_debug_shows_the_traceback_and_keeps_status_2(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"other.weight": torch.ones(1)}, "pytorch-lightning_version": "2.6.0"}, foreign)
    argv = ["--strategy", "dp", "--logger", "none", "--output-dir", str(tmp_path / "out"), "--ckpt-path", str(foreign)]
    for debug in (False, True):
        proc = run_python([str(TRAIN), *argv, *(["--debug"] if debug else [])], timeout=120, expect=2)
        assert proc.stderr.strip().splitlines()[-1].startswith("train.py: error: "), proc.stderr[-2000:]
        assert ("Traceback" in proc.stderr) == debug
