"""``examples/train.py``: the main job.

The in-process tests; the ones that launch processes are in ``tests/integration/examples/test_train.py``.
"""

from __future__ import annotations

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
        (["--ckpt-path", "/nonexistent/last.ckpt"], "does not exist; pass the path of a .ckpt"),
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
    """Bad input found after parsing (a checkpoint cut short by a kill) prints its message alone; ``--debug`` raises it
    with the traceback. In-process: ``dp`` on the CPU fails before anything launches."""
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(b"PK\x03\x04 cut short")
    train = import_train_script()
    argv = ["--strategy", "dp", "--logger", "none", "--output-dir", str(tmp_path / "out"), "--ckpt-path", str(bad)]
    with pytest.raises(SystemExit) as exit_info:
        train.run(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and exit_info.value.__cause__ is None, err
    assert f"train.py: error: Checkpoint {bad} cannot be read" in err and "Use an earlier checkpoint" in err, err
    assert "Traceback" not in err
    with pytest.raises(train.CheckpointReadError):
        train.run([*argv, "--debug"])
