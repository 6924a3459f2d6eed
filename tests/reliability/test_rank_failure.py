"""Promise 1: a rank that raises or is SIGKILLed mid-epoch fails the whole job promptly, leaving no process.

Each case starts ``run_faulty`` (2 ranks, gloo) with the fault planted on rank 1 at step 3, and checks: the
launcher exits non-zero within ``EXIT_BOUND_S`` of the fault; its output names the failure; no process of the
job is alive afterwards.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.launch import run_command
from tests.helpers.runif import RunIf

EXIT_BOUND_S = 60.0
# What each launcher prints about the failed rank: its exception, or the signal that ended it.
STRATEGIES = [
    pytest.param("ddp", id="ddp"),
    pytest.param("ddp_spawn", id="ddp_spawn"),
    pytest.param("sharded", id="sharded", marks=RunIf(fairscale=True).marks),
    pytest.param("sharded_spawn", id="sharded_spawn", marks=RunIf(fairscale=True).marks),
    pytest.param("horovod", id="horovod", marks=RunIf(horovod=True).marks),
]
# What the launcher must print: the failed rank's exception, or the rank and the signal that ended it
# (torch.multiprocessing: "process 1 terminated with signal SIGKILL"; horovodrun: "Process 1 exit with status
# code 137"; Lightning's script launcher, through CleanExit/ShardedStrategy: "rank 1 ... SIGKILL").
FAULTS = {
    "raise": r"injected fault on rank 1 at step 3",
    "kill": r"process 1 terminated with signal SIGKILL|Process 1 exit with status code 137|rank 1 \(pid \d+\) was killed by SIGKILL",
}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; only its parent's bookkeeping is left


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_failed_rank_fails_the_job_promptly_and_leaves_nothing(strategy: str, fault: str, tmp_path: Path, record_property) -> None:
    import re

    out = tmp_path / "run"
    start = time.monotonic()
    code, log, elapsed = run_command(
        [sys.executable, "-m", "tests.integration.runners.run_faulty", "--strategy", strategy, "--fault", fault,
         "--rank", "1", "--step", "3", "--out", str(out)],
        timeout=180, expect_ok=False,
    )
    assert code != 0, log[-3000:]
    assert re.search(FAULTS[fault], log), log[-3000:]
    rank1_started = (out / "pid_rank1").stat().st_mtime
    # From rank 1's start to the launcher's exit: covers the fault (3 small steps later) and the teardown.
    to_exit = (start + elapsed) - (rank1_started - time.time() + time.monotonic())
    assert to_exit < EXIT_BOUND_S, f"the job took {to_exit:.1f}s to exit after rank 1 started"
    record_property("seconds_to_exit_after_rank1_start", round(to_exit, 1))
    print(f"{strategy}/{fault}: exit {code} {to_exit:.1f}s after rank 1 started")
    time.sleep(1.0)  # let the kernel reap the last workers
    pids = {p.name: int(p.read_text()) for p in out.glob("pid_*")}
    left = {name: pid for name, pid in pids.items() if _alive(pid) and pid != os.getpid()}
    assert left == {}, f"processes left behind: {left}"
