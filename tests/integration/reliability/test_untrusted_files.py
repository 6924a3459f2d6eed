"""Promise 8: a checkpoint is data. A planted pickle payload is refused everywhere, and never runs.

The payload is a real one: unpickling it calls ``os.system("touch MARKER")``. Each test checks the refusal
*and* that the marker file was never created.

The tests that launch processes; the in-process ones are in ``tests/unit/reliability/test_untrusted_files.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers.launch import FAILS, REPO_ROOT, run
from tests.unit.reliability.test_untrusted_files import _Payload, marker, plant  # noqa: F401


def test_train_py_refuses_a_payload_before_any_worker_starts(tmp_path: Path, marker: Path) -> None:
    from lightning_mgpu.demos import ImageClassifier as Classifier

    path = plant(tmp_path / "evil.ckpt", marker, Classifier())
    proc = run(
        [
            sys.executable,
            str(REPO_ROOT / "examples" / "train.py"),
            "--ckpt-path",
            str(path),
            "--output-dir",
            str(tmp_path / "out"),
        ],
        timeout=180,
        expect=FAILS,  # refused
    )
    assert "Refused to load" in proc.stderr and "Nothing was executed" in proc.stderr, proc.stderr[-2000:]
    assert "Initializing distributed" not in proc.stdout + proc.stderr  # refused in the launcher, before the ranks
    assert not marker.exists()
