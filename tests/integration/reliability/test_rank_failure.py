"""Promise 1: a rank that raises or is SIGKILLed mid-epoch fails the whole job promptly, leaving no process.

Each case starts ``run_faulty`` (2 ranks, gloo) with the fault planted on rank 1 at step 3, and checks: the
launcher exits non-zero within ``EXIT_BOUND_S`` of the fault; its output names the failure; afterwards no process of
the job is alive, nothing listens on its rendezvous port, and no shared-memory segment it made is left in /dev/shm.
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


def _shm() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()} if Path("/dev/shm").is_dir() else set()


def _made_by(names: set[str], pids: set[int]) -> set[str]:
    """The segments among ``names`` that these processes made: torch names its ``torch_<pid>_...``; Python's
    multiprocessing uses ``psm_``/``wnsm_`` (shared_memory) and ``sem.mp-`` (semaphores). Other programs' are ignored."""
    return {n for n in names if any(f"torch_{pid}_" in n for pid in pids) or n.startswith(("psm_", "wnsm_", "sem.mp-"))}


def _in_use() -> set[str]:
    """Segments of /dev/shm that a live process has mapped (another test's workers running beside this one): a
    segment left behind by a dead job is mapped by none. Matched by inode: a POSIX semaphore is mapped under the
    temporary name glibc created it with, before it was linked to its ``sem.mp-`` name."""
    inodes = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # the process ended meanwhile
            continue
        inodes.update(int(line.split()[4]) for line in text.splitlines() if "/dev/shm/" in line)
    used = set()
    for path in Path("/dev/shm").iterdir() if Path("/dev/shm").is_dir() else ():
        try:
            if path.stat().st_ino in inodes:
                used.add(path.name)
        except OSError:
            continue
    return used


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_failed_rank_fails_the_job_promptly_and_leaves_nothing(strategy: str, fault: str, tmp_path: Path, record_property) -> None:
    import re

    out = tmp_path / "run"
    shm_before = _shm()
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
    ports = {int(p.read_text()) for p in out.glob("port_rank*")}
    assert ports, "the job recorded no rendezvous port"
    assert not ports & _listening_ports(), f"still listening on the job's port(s) {sorted(ports & _listening_ports())}"
    leaked = _made_by(_shm() - shm_before, set(pids.values())) - _in_use()
    assert not leaked, f"shared memory left in /dev/shm: {sorted(leaked)}"
