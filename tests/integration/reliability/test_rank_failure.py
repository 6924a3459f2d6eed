"""Promise 1: a rank that raises or is SIGKILLed mid-epoch fails the whole job promptly, leaving no process.

Each case starts ``run_faulty`` (2 ranks, gloo) with the fault planted on rank 1 at step 3, and checks: the
launcher exits non-zero within ``EXIT_BOUND_S`` of the fault; its output names the failure; afterwards no process of
the job is alive, nothing listens on its rendezvous port, and nothing is left in its /dev/shm (a private one per
job, so that another test's segments cannot count).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import shm
from tests.helpers.launch import FAILS, run_command
from tests.helpers.runif import RunIf

EXIT_BOUND_S = 60.0
# What each launcher prints about the failed rank: its exception, or the signal that ended it.
STRATEGIES = [
    pytest.param("ddp", id="ddp"),
    # Lightning's spawn launcher: sharded_spawn goes through it as well (the default tier runs that one).
    pytest.param("ddp_spawn", id="ddp_spawn", marks=pytest.mark.extended),
    pytest.param("sharded", id="sharded", marks=RunIf(fairscale=True).marks),
    pytest.param("sharded_spawn", id="sharded_spawn", marks=RunIf(fairscale=True).marks),
    pytest.param("horovod", id="horovod", marks=RunIf(horovod=True).marks),
]
# What the launcher must print: the failed rank's exception, or the rank and the signal that ended it
# (torch.multiprocessing: "process 1 terminated with signal SIGKILL"; horovodrun: "Process 1 exit with status
# code 137"; Lightning's script launcher, through CleanExit/ShardedStrategy: "rank 1 ... SIGKILL").
FAULTS = {
    "raise": r"injected fault on rank 1 at step 3",
    "kill": (
        r"process 1 terminated with signal SIGKILL|Process 1 exit with status code 137"
        r"|rank 1 \(pid \d+\) was killed by SIGKILL"
    ),
}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; only its parent's bookkeeping is left


def _listening_ports() -> set[int]:
    """TCP ports in LISTEN state on this machine (IPv4 and IPv6), from /proc/net."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # 0A: TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


#: A raised exception and a SIGKILL under every launcher. The default tier runs one fault per launcher: the kill
#: under ddp's (Lightning's script launcher), the spawn launcher and horovod's, and ddp's raise; the extended tier the
#: rest (sharded goes through ddp's launcher; a raise is reported by each launcher as under ddp).
EXTENDED_CASES = {("sharded", "raise"), ("sharded", "kill"), ("sharded_spawn", "raise"), ("horovod", "raise")}
CASES = [
    pytest.param(
        param.values[0],
        fault,
        id=f"{param.id}-{fault}",
        marks=[*param.marks, *([pytest.mark.extended] if (param.values[0], fault) in EXTENDED_CASES else [])],
    )
    for param in STRATEGIES
    for fault in FAULTS
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("strategy,fault", CASES)
def test_a_failed_rank_fails_the_job_promptly_and_leaves_nothing(
    strategy: str, fault: str, tmp_path: Path, record_property
) -> None:
    import re

    out, private_shm = tmp_path / "run", tmp_path / "shm"
    cmd = [
        sys.executable,
        "-m",
        "tests.integration.runners.run_faulty",
        "--strategy",
        strategy,
        "--fault",
        fault,
        "--rank",
        "1",
        "--step",
        "3",
        "--out",
        str(out),
    ]
    no_private_shm = shm.unavailable()  # without one (not root), every other check still runs
    start = time.monotonic()
    code, log, elapsed = run_command(
        cmd if no_private_shm else shm.with_private_shm(cmd, private_shm), timeout=180, expect=FAILS
    )
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
    ports = {int(p.read_text()) for p in out.glob("port_rank*")}
    assert ports, "the job recorded no rendezvous port"
    assert not ports & _listening_ports(), f"still listening on the job's port(s) {sorted(ports & _listening_ports())}"
    if no_private_shm:
        pytest.skip(f"the job's exit, processes and port were checked; its /dev/shm was not: {no_private_shm}")
    # Every process of the job had its own /dev/shm (tests/helpers/shm.py): anything in it now, the job leaked.
    assert not shm.left_in(private_shm), f"shared memory left in /dev/shm: {shm.left_in(private_shm)}"


def test_the_private_shm_sees_what_its_job_leaks_and_nothing_else(tmp_path: Path) -> None:
    """The check above can fail: a named POSIX semaphore that a job makes and never unlinks (what a rank killed
    together with multiprocessing's resource tracker leaves) is in its private /dev/shm, and a segment made on the
    machine's /dev/shm meanwhile (another test's) does not show there."""
    if shm.unavailable():
        pytest.skip(shm.unavailable())
    leak = "import ctypes, os; ctypes.CDLL(None, use_errno=True).sem_open(b'/mp-leaked', os.O_CREAT, 0o600, 1)"
    beside = Path("/dev/shm") / f"sem.mp-beside-{os.getpid()}"
    beside.write_bytes(b"")
    try:
        run_command(shm.with_private_shm([sys.executable, "-c", leak], tmp_path / "shm"), timeout=60)
    finally:
        beside.unlink()
    left = shm.left_in(tmp_path / "shm")
    assert left == ["sem.mp-leaked"], left


@RunIf(fairscale=True)
@pytest.mark.timeout(240)
def test_the_rank_that_failed_first_is_reported_though_another_ends_sooner(tmp_path: Path) -> None:
    """torch.multiprocessing reports the first worker it sees exit. Rank 1 raises, then closes its connections and
    takes 3 s more to exit, so rank 0's collective breaks ("Connection closed by peer") and rank 0 ends first. The job
    still reports rank 1's error: found as a flaky failure of the sharded_spawn case above on CI, 2026-11-28."""
    cmd = [sys.executable, "-m", "tests.integration.runners.run_faulty", "--strategy", "sharded_spawn"]
    cmd += ["--fault", "raise", "--rank", "1", "--step", "3", "--out", str(tmp_path / "run"), "--linger", "3"]
    code, log, _ = run_command(cmd, timeout=180, expect=FAILS)
    assert "Process 1 failed first" in log and re.search(FAULTS["raise"], log), log[-3000:]
    assert "process 0 failed after it" in log, log[-3000:]
