"""Promise 7: bad input to ``examples/train.py`` is refused before any work, naming the problem and the fix.

The in-process tests; the ones that launch processes are in ``tests/integration/reliability/test_bad_input.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.launch import import_train_script

#: Refused by the argument parser, the first thing ``main`` runs: checked in-process (a fresh interpreter per case cost
#: 6 s of imports), and the script's own exit through the parser once
#: (``test_a_bad_flag_exits_the_script_with_status_2``).
PARSER_CASES = {
    "too many CPU processes": (lambda t: ["--accelerator", "cpu", "--devices", "64"], "this machine has"),
    "16-mixed on CPU": (lambda t: ["--accelerator", "cpu", "--precision", "16-mixed"], "needs a CUDA GPU"),
    "unknown strategy": (lambda t: ["--strategy", "ddp3"], "invalid choice: 'ddp3' (choose from"),
    "zero accumulation": (lambda t: ["--accumulate-grad-batches", "0"], "expected a positive integer"),
    "negative lr": (lambda t: ["--lr", "-1"], "expected a positive number"),
    "zero batch": (lambda t: ["--batch-size", "0"], "expected a positive integer"),
    "cache dir is a file": (lambda t: ["--cache-dir", str(_file(t))], "is a file, not a folder"),
}


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "not_a_folder"
    path.write_text("x")
    return path


@pytest.mark.parametrize("case", list(PARSER_CASES))
def test_refused_by_the_argument_parser(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv, message = PARSER_CASES[case]
    with pytest.raises(SystemExit) as exit_info:
        import_train_script().parse_args(["--output-dir", str(tmp_path / "out"), *argv(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err, err
    assert not (tmp_path / "out").exists()  # nothing written
