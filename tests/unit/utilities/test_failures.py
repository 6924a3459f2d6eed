"""``record_failure`` / ``first_failure``: the worker that failed first is the one a spawn launch reports."""

from __future__ import annotations

import json
from pathlib import Path

from lightning_mgpu.utilities.failures import describe_exit, first_failure, record_failure


def test_the_earliest_recorded_failure_is_the_cause(tmp_path: Path) -> None:
    assert first_failure(tmp_path) is None
    for rank, error in ((1, ValueError("injected fault")), (0, RuntimeError("Connection closed by peer"))):
        try:
            raise error
        except Exception:
            record_failure(tmp_path, rank)
    first = first_failure(tmp_path)
    assert first is not None and first.rank == 1 and "ValueError: injected fault" in first.trace
    # Recorded later but stamped earlier (the clock, not the file order, decides), and a torn record is skipped.
    record = json.loads((tmp_path / "rank0.json").read_text())
    (tmp_path / "rank0.json").write_text(json.dumps({**record, "at": first.at - 1.0}))
    (tmp_path / "rank2.json").write_text('{"rank": 2, "at"')
    earliest = first_failure(tmp_path)
    assert earliest is not None and earliest.rank == 0


def test_exit_codes_are_described_with_their_likely_cause() -> None:
    assert describe_exit(-9).startswith("was killed by SIGKILL (the kernel's OOM killer")
    assert describe_exit(1) == "exited with code 1 (its own error is printed above)"
