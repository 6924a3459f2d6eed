"""A private /dev/shm for one launched job, so that what the job leaves there is known to be its own.

Python's multiprocessing names its semaphores ``sem.mp-<random>`` and its shared memory ``psm_<random>``: nothing in
the name says which process made them. On the machine's /dev/shm a test cannot tell a segment its job leaked from
one a test on the other xdist worker made in the same seconds. Run in its own mount namespace with a test folder
bound over /dev/shm, the job and every process it starts (they inherit the namespace) create their segments in that
folder, and nothing else can. After the job has exited, whatever is still in the folder is a leak.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path


@functools.cache
def unavailable() -> str | None:
    """Why a private /dev/shm cannot be given to a job here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "a private /dev/shm needs root (a mount namespace)"
    if shutil.which("unshare") is None:
        return "a private /dev/shm needs util-linux's unshare"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare --mount failed here: {probe.stderr.strip()}"


def with_private_shm(cmd: list[str], shm_dir: Path) -> list[str]:
    """``cmd`` run in a new mount namespace where ``shm_dir`` is bound over /dev/shm (``exec``: same process)."""
    shm_dir.mkdir(parents=True, exist_ok=True)
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount --bind "$0" /dev/shm && exec "$@"',
        str(shm_dir),
        *cmd,
    ]


def left_in(shm_dir: Path) -> list[str]:
    """The segments in a job's private /dev/shm: after the job has exited, each is one it leaked."""
    return sorted(p.name for p in shm_dir.iterdir())
