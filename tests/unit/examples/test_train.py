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
    ],
)
def test_bad_flags_fail_clearly(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    # In-process: parse_args alone refuses these (the script's exit status is checked once, below).
    with pytest.raises(SystemExit) as exit_info:
        import_train_script().parse_args(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert message in err, err

