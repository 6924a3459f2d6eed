"""Promise 6: ports. Fits in any order in one process; a busy MASTER_PORT; two jobs started at once.

The tests that launch processes; the in-process ones are in ``tests/unit/reliability/test_ports.py``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.launch import REPO_ROOT, finish, run_python, start
from tests.helpers.runif import RunIf

# Every transition that failed before, in two launches (a launch is mostly imports; each *_spawn fit starts 2 workers):
# - sharded -> sharded_spawn failed with EADDRINUSE: the first fit's store kept MASTER_PORT; the same after ddp and dp,
#   and under the ddp_sharded aliases;
# - Lightning's own ddp -> ddp_spawn (and back): plain Lightning 2.6 fails the same way; the bundle's callbacks_factory
#   entry point (run for every Trainer) moves MASTER_PORT off the earlier fit's store.
# The default tier's sequence takes each of those transitions once; the extended tier's take them again in the other
# direction, and from dp and the aliases.
SEQUENCES = [
    ["ddp", "ddp_spawn", "ddp", "sharded", "sharded_spawn"],
    ["ddp_spawn", "ddp", "ddp_spawn", "ddp", "sharded_spawn", "sharded", "sharded_spawn"],
    ["dp", "sharded_spawn", "ddp_sharded", "ddp_sharded_spawn"],
]


@RunIf(fairscale=True)
@pytest.mark.timeout(480)
@pytest.mark.parametrize(
    "names",
    [SEQUENCES[0], *(pytest.param(s, marks=pytest.mark.extended) for s in SEQUENCES[1:])],
    ids=["-".join(s) for s in SEQUENCES],
)
def test_fits_in_one_process_in_any_order(names: list[str]) -> None:
    out = run_python(["-m", "tests.integration.runners.run_fit_sequence", *names], timeout=420).stdout
    assert [line for line in out.splitlines() if line.startswith("FIT ")] == [f"FIT {n} OK" for n in names]


@RunIf(fairscale=True)
@pytest.mark.timeout(300)
def test_a_pinned_port_held_by_another_program_is_replaced_with_a_notice() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        proc = run_python(
            ["-m", "tests.integration.runners.run_fit_sequence", "sharded_spawn"],
            timeout=240,
            env={"MASTER_PORT": str(port)},
        )
    assert "FIT sharded_spawn OK" in proc.stdout
    assert f"MASTER_PORT={port} is in use" in proc.stderr  # one line, naming the port it left


@pytest.mark.timeout(400)
def test_two_jobs_started_at_the_same_moment_both_finish(tmp_path: Path) -> None:
    train = str(REPO_ROOT / "examples" / "train.py")
    # start's environment has no MASTER_PORT/MASTER_ADDR: each job finds its own port.
    jobs = [
        start(
            [sys.executable, train, "--max-steps", "5", "--logger", "none", "--output-dir", str(tmp_path / f"job{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    for i, job in enumerate(jobs):
        finish(job, timeout=300, what=f"job {i}")
        assert (tmp_path / f"job{i}" / "summary.json").is_file()
