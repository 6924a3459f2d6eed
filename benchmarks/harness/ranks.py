"""Waiting for a benchmark's launched ranks: the first failure (or the deadline) stops them all."""

from __future__ import annotations

import subprocess
import time


def wait_for_ranks(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """Wait for every rank; kill all of them once one exits non-zero or ``timeout`` seconds pass. Returns each rank's
    captured output ('' where it was not piped); the caller checks the return codes."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            break
        time.sleep(0.2)
    return [p.communicate()[0] or "" for p in procs]
