"""``examples/train.py``: the main job.

The in-process tests; the ones that launch processes are in ``tests/integration/examples/test_train.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.launch import import_train_script


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--strategy", "fsdp2"], "argument --strategy: invalid choice: 'fsdp2'"),
        (["--devices", "0"], "--devices must be >= 1"),
        (["--devices", "two"], "--devices must be an integer, 'auto' or a list"),
        (["--batch-size", "-4"], "expected a positive integer, got -4"),
        (["--lr", "0"], "expected a positive number"),
        (["--ckpt-path", "/nonexistent/last.ckpt"], "does not exist; pass a .ckpt file, or a sharded checkpoint's"),
        (["--data", "imagenet"], "invalid choice: 'imagenet'"),
        (["--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        (["--preprocess", "ray", "--data", "synthetic"], "use it with --data digits"),
        (["--strategy", "ddp", "--checkpoint-format", "sharded"], "'ddp' always saves one file"),
        (["--strategy", "sharded", "--async-save"], "--async-save writes sharded checkpoint folders in the background"),
        (
            ["--strategy", "sharded_fsdp2", "--async-save", "--launcher", "ray"],
            "--async-save cannot run under --launcher ray",
        ),
        (["--strategy", "sharded_fsdp2", "--checkpoint-format", "full", "--async-save"], "--checkpoint-format full)"),
        (["--strategy", "dp", "--fsdp2-mp", "bf16"], "are FSDP2's policies: use --strategy sharded_fsdp2"),
        (
            ["--strategy", "sharded_fsdp2", "--fsdp2-mp", "bf16", "--precision", "bf16-mixed"],
            "already sets the compute dtype",
        ),
        (
            ["--strategy", "sharded_fsdp2", "--accelerator", "cpu", "--fsdp2-offload"],
            "without a GPU they are there already",
        ),
    ],
)
def test_bad_flags_fail_clearly(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    # In-process: parse_args alone refuses these (the script's exit status is checked once, below).
    with pytest.raises(SystemExit) as exit_info:
        import_train_script().parse_args(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert message in err, err


def test_a_truncated_checkpoint_is_one_message_and_status_2(tmp_path, capsys: pytest.CaptureFixture) -> None:
    """A checkpoint cut short by a kill is refused with one line and status 2 before anything is built; ``--debug``
    adds the traceback and keeps status 2."""
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(b"PK\x03\x04 cut short")
    train = import_train_script()
    argv = ["--strategy", "dp", "--logger", "none", "--output-dir", str(tmp_path / "out"), "--ckpt-path", str(bad)]
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.count("\n") == 1 and f"--ckpt-path {str(bad)!r} is cut short or damaged" in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_debug_keeps_status_2_and_adds_the_traceback(tmp_path, capsys: pytest.CaptureFixture) -> None:
    """Bad input found after parsing (a checkpoint whose keys do not fit the model) is one line and status 2;
    ``--debug`` prints the traceback above that line and still exits 2."""
    import torch

    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"other.weight": torch.ones(1)}, "pytorch-lightning_version": "2.6.0"}, foreign)
    train = import_train_script()
    argv = ["--strategy", "dp", "--logger", "none", "--output-dir", str(tmp_path / "out"), "--ckpt-path", str(foreign)]
    for debug in (False, True):
        with pytest.raises(SystemExit) as exit_info:
            train.run([*argv, *(["--debug"] if debug else [])])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, err
        assert err.strip().splitlines()[-1].startswith("train.py: error: "), err
        assert ("Traceback" in err) == debug, err


def _bad_inputs(tmp: Path) -> dict[str, list[tuple[list[str], str]]]:
    """Per flag of train.py: command lines that must be refused, and what the refusal says."""
    empty, text, truncated, a_file = tmp / "empty.ckpt", tmp / "notes.ckpt", tmp / "cut.ckpt", tmp / "a_file"
    empty.write_bytes(b"")
    text.write_text("not a checkpoint")
    truncated.write_bytes(b"PK\x03\x04 cut short")
    a_file.write_text("x")
    (tmp / "empty_folder").mkdir()
    flag_value = "ignored explicit argument"  # a switch given a value
    return {
        "--strategy": [(["--strategy", "fsdp2"], "invalid choice: 'fsdp2'")],
        "--accelerator": [
            (["--accelerator", "tpu"], "invalid choice: 'tpu'"),
            (["--accelerator", "gpu"], "--accelerator gpu: no CUDA GPU is visible here"),
        ],
        "--devices": [
            (["--devices", "-1"], "--devices -1 means every GPU, and this run is on the CPU"),
            (["--devices", "0,1"], "--devices 0,1 picks GPUs by index, and this run is on the CPU"),
            (["--devices", "0"], "--devices must be >= 1"),
            (["--devices", "two"], "--devices must be an integer"),
            (["--devices", "4096"], "CPU training processes"),
        ],
        "--num-nodes": [(["--num-nodes", "0"], "expected a positive integer")],
        "--precision": [
            (["--precision", "8"], "invalid choice: '8'"),
            (["--precision", "16-mixed", "--accelerator", "cpu"], "needs a CUDA GPU"),
        ],
        "--accumulate-grad-batches": [(["--accumulate-grad-batches", "0"], "expected a positive integer")],
        "--max-epochs": [(["--max-epochs", "0"], "expected a positive integer")],
        "--max-steps": [(["--max-steps", "0"], "--max-steps must be -1"), (["--max-steps", "x"], "invalid int")],
        "--batch-size": [(["--batch-size", "-4"], "expected a positive integer, got -4")],
        "--lr": [(["--lr", "0"], "expected a positive number"), (["--lr", "fast"], "expected a positive number")],
        "--optimizer": [(["--optimizer", "lbfgs"], "invalid choice: 'lbfgs'")],
        "--weight-decay": [(["--weight-decay", "-1"], "expected a number >= 0")],
        "--scale-lr": [(["--scale-lr=yes"], flag_value)],
        "--seed": [(["--seed", "x"], "invalid int value")],
        "--debug": [(["--debug=1"], flag_value)],
        "--deterministic": [(["--deterministic=1"], flag_value)],
        "--trust-checkpoint": [(["--trust-checkpoint=yes"], flag_value)],
        "--data": [(["--data", "imagenet"], "invalid choice: 'imagenet'")],
        "--num-workers": [(["--num-workers", "-1"], "--num-workers must be >= 0")],
        "--logger": [(["--logger", "comet"], "invalid choice: 'comet'")],
        "--output-dir": [
            (["--output-dir", str(a_file)], "is a file, not a folder"),
            (["--output-dir", "/proc/lightning_mgpu_test"], "cannot be written"),
        ],
        "--ckpt-path": [
            (["--ckpt-path", str(tmp / "missing.ckpt")], "does not exist"),
            (["--ckpt-path", str(empty)], "is empty (0 bytes)"),
            (["--ckpt-path", str(text)], "is not a torch checkpoint"),
            (["--ckpt-path", str(truncated)], "is cut short or damaged"),
            (["--ckpt-path", str(tmp / "empty_folder")], "is a folder but not a sharded checkpoint"),
        ],
        "--fsdp2-mp": [
            (["--fsdp2-mp", "fp8"], "invalid choice: 'fp8'"),
            (["--strategy", "dp", "--fsdp2-mp", "bf16"], "are FSDP2's policies"),
        ],
        "--fsdp2-offload": [
            (["--strategy", "sharded_fsdp2", "--accelerator", "cpu", "--fsdp2-offload"], "there already"),
        ],
        "--checkpoint-format": [
            (["--checkpoint-format", "zip"], "invalid choice: 'zip'"),
            (["--strategy", "ddp", "--checkpoint-format", "sharded"], "'ddp' always saves one file"),
        ],
        "--async-save": [(["--strategy", "sharded", "--async-save"], "--async-save writes sharded checkpoint folders")],
        "--resume": [(["--resume", "sometimes"], "invalid choice: 'sometimes'")],
        "--save-on-interrupt": [(["--save-on-interrupt=x"], flag_value)],
        "--no-save-on-interrupt": [(["--no-save-on-interrupt=x"], flag_value)],
        "--rdzv-timeout": [(["--rdzv-timeout", "0"], "expected a positive number")],
        "--sync-batchnorm": [(["--sync-batchnorm=1"], flag_value)],
        "--gradient-clip-val": [(["--gradient-clip-val", "-1"], "expected a positive number")],
        "--activation-checkpointing": [(["--activation-checkpointing", " "], "needs a pattern of module names")],
        "--zero-grad-set-to-none": [(["--zero-grad-set-to-none=1"], flag_value)],
        "--grad-sync-toggle": [(["--grad-sync-toggle=1"], flag_value)],
        "--gpu-monitor": [(["--gpu-monitor=1"], flag_value)],
        "--monitor-interval": [(["--monitor-interval", "0"], "expected a positive number")],
        "--launcher": [(["--launcher", "slurm"], "invalid choice: 'slurm'")],
        "--ray-workers": [(["--ray-workers", "0"], "expected a positive integer")],
        "--ray-address": [(["--ray-address", "auto"], "only apply to --launcher ray")],
        "--max-failures": [(["--max-failures", "3"], "only apply to --launcher ray")],
        "--ray-cpus-per-worker": [(["--ray-cpus-per-worker", "0"], "expected a positive number")],
        "--preprocess": [
            (["--preprocess", "gpu"], "invalid choice: 'gpu'"),
            (["--preprocess", "processes", "--data", "synthetic"], "use it with --data digits"),
        ],
        "--cache-dir": [
            (["--cache-dir", str(a_file)], "is a file, not a folder"),
            (["--cache-dir", "/proc/lightning_mgpu_cache"], "cannot be written"),
        ],
    }


def test_every_flag_refuses_bad_values_with_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated per flag: each bad value is refused by parse_args alone (before Lightning is imported), with one line
    `train.py: error: ...` naming the value and the fix, status 2, no traceback, and nothing left on disk."""
    train = import_train_script()
    monkeypatch.setattr(train, "_cuda_available", lambda: False)  # this machine's truth, made explicit
    monkeypatch.setattr(train, "_cuda_count", lambda: 0)
    cases = _bad_inputs(tmp_path)
    flags = {s for action in train.build_parser()._actions for s in action.option_strings} - {"-h", "--help"}
    assert set(cases) == flags, f"flags without a bad-input case: {flags - set(cases)}"
    before = sorted(p.name for p in tmp_path.iterdir())
    for flag, bad in cases.items():
        for argv, says in bad:
            with pytest.raises(SystemExit) as exit_info:
                train.parse_args(argv)
            err = capsys.readouterr().err
            assert exit_info.value.code == 2, (argv, err)
            assert err.count("\n") == 1 and err.startswith("train.py: error: ") and says in err, (flag, argv, err)
            assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/proc/lightning_mgpu_test").exists()


def test_old_torch_refuses_ckpt_path_unless_trust_checkpoint(tmp_path, capsys, monkeypatch) -> None:
    """On a torch below 2.10 (GHSA-63cw-57p8-fm3p) --ckpt-path is refused with one line and status 2 before anything
    is read; --trust-checkpoint reads it (here: a checkpoint of another model, so the key check answers next)."""
    import torch

    from lightning_mgpu.security import advisories

    monkeypatch.setattr(advisories, "installed_version", lambda package: "2.9.1" if package == "torch" else None)
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"other.weight": torch.ones(1)}, "pytorch-lightning_version": "2.6.0"}, foreign)
    train = import_train_script()
    argv = ["--strategy", "dp", "--logger", "none", "--output-dir", str(tmp_path / "out"), "--ckpt-path", str(foreign)]
    for flags, says in (([], "GHSA-63cw-57p8-fm3p"), (["--trust-checkpoint"], "was not written by this model")):
        with pytest.raises(SystemExit) as exit_info, pytest.warns(UserWarning) if flags else _nothing():
            train.run([*argv, *flags])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, err
        assert err.count("\n") == 1 and says in err, (flags, err)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_docs_train_md_has_a_row_for_every_flag() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "train.md").read_text()
    rows = "\n".join(line for line in docs.splitlines() if line.startswith("| `--"))
    flags = {s for action in import_train_script().build_parser()._actions for s in action.option_strings}
    missing = [
        f
        for f in sorted(flags - {"-h", "--help"})
        if f"`{f}" not in rows and f"{f}`" not in rows and f"/ `{f}" not in rows
    ]
    assert not missing, f"docs/train.md has no row for {missing}"
