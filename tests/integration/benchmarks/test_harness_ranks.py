"""``benchmarks/harness/ranks.py``: every benchmark's rank launcher, on real processes."""

from __future__ import annotations

import time

import pytest

from benchmarks.harness.ranks import ProcessFailure, launch_ranks

_REPORT = (
    "import os; print(os.environ['RANK'], os.environ['LOCAL_RANK'], os.environ['WORLD_SIZE'],"
    " os.environ['MASTER_PORT'], os.environ['X'])"
)


def test_each_rank_gets_the_rendezvous_and_the_extra_environment() -> None:
    outputs = launch_ranks(["-c", _REPORT], 3, timeout=60, env={"X": "extra"}, capture_rank0=True)
    rows = [line.split() for line in (out.strip() for out in outputs)]
    assert [r[:3] for r in rows] == [["0", "0", "3"], ["1", "1", "3"], ["2", "2", "3"]]
    assert len({r[3] for r in rows}) == 1 and all(r[4] == "extra" for r in rows)  # one port for the job


def test_a_failing_rank_stops_the_others_at_once_and_is_named_with_its_error() -> None:
    script = "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit('rank one broke')\ntime.sleep(120)"
    start = time.monotonic()
    with pytest.raises(ProcessFailure, match=r"job: rank 1 exited with 1\nrank one broke"):
        launch_ranks(["-c", script], 2, timeout=60, what="job")
    assert time.monotonic() - start < 20, "rank 0 (sleeping) was not stopped when rank 1 failed"
    with pytest.raises(ProcessFailure, match="ran past 1 s"):
        launch_ranks(["-c", "import time; time.sleep(30)"], 1, timeout=1, rendezvous=False)
