"""Promise 7: bad input to ``examples/train.py`` is refused before any work, naming the problem and the fix.

The tests that launch processes; the in-process ones are in ``tests/unit/reliability/test_bad_input.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from lightning_mgpu.demos import ImageClassifier
from tests.helpers.launch import FAILS, TRAIN, run

REFUSAL_BOUND_S = 60.0


def _train(*argv: str, tmp_path: Path) -> tuple[int, str, float]:
    start = time.monotonic()
    # Every case here must be refused: any non-zero code (the message is what each test checks).
    proc = run([sys.executable, TRAIN, "--output-dir", str(tmp_path / "out"), *argv], timeout=180, expect=FAILS)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def _truncated(tmp_path: Path) -> Path:
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": ImageClassifier().state_dict(), "epoch": 1}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # what a kill in the middle of a non-atomic save leaves
    return path


def _foreign(tmp_path: Path) -> Path:
    path = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"encoder.weight": torch.zeros(2, 2), "features.0.weight": torch.zeros(1)}}, path)
    return path


#: Refused before any process starts (a truncated file by the command line check, a foreign one once the model is
#: built): run as a user runs them.
SCRIPT_CASES = {
    "truncated checkpoint": (lambda t: ["--ckpt-path", str(_truncated(t))], "is cut short or damaged"),
    "foreign checkpoint": (lambda t: ["--ckpt-path", str(_foreign(t))], "missing key(s)"),
}


@pytest.mark.parametrize("case", list(SCRIPT_CASES))
def test_refused_before_any_work(case: str, tmp_path: Path) -> None:
    argv, message = SCRIPT_CASES[case]
    args = argv(tmp_path)
    code, text, seconds = _train(*args, tmp_path=tmp_path)
    assert code != 0 and message in text, text[-3000:]
    assert "Initializing distributed" not in text and "Epoch 0" not in text  # no rank, no step
    assert seconds < REFUSAL_BOUND_S
    if case == "foreign checkpoint":
        assert "encoder.weight" in text and "was left untouched" in text
    assert Path(args[-1]).is_file()  # the user's file is kept as it was


_WITHOUT_FAIRSCALE = """
import runpy, sys
sys.modules["fairscale"] = None  # Python's own way to make an import fail as if the package were not installed
sys.argv = [{train!r}, "--strategy", "sharded", "--output-dir", {out!r}]
runpy.run_path({train!r}, run_name="__main__")
"""


def test_a_missing_optional_dependency_names_the_extra(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = run(
        [sys.executable, "-c", _WITHOUT_FAIRSCALE.format(train=TRAIN, out=str(tmp_path / "out"))],
        timeout=180,
        expect=FAILS,
    )
    text = proc.stdout + proc.stderr
    assert "needs `fairscale`" in text and "pip install 'fairscale==0.4.13' (the [sharded] extra" in text, text[-3000:]
    assert "Initializing distributed" not in text and "Epoch 0" not in text
    assert time.monotonic() - start < REFUSAL_BOUND_S
