"""Say which rank failed and how, when rank 0 only sees a collective break.

Under Lightning's script launcher (``ddp``, ``sharded``: rank 0 starts the other ranks as child processes), a
rank killed by the OOM killer or a pre-emption shows up on rank 0 as gloo's "Connection reset by peer" or
NCCL's timeout, which names neither the rank nor the cause. Rank 0 holds the children's ``Popen`` objects:
their exit status says it.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_mgpu.utilities.process_group import mark_failed

log = logging.getLogger(__name__)

_SIGNAL_CAUSES = {
    signal.SIGKILL: "the kernel's OOM killer, a scheduler's pre-emption or `kill -9`",
    signal.SIGTERM: "a scheduler or a user stopping it",
    signal.SIGSEGV: "a crash in native code",
    signal.SIGABRT: "an abort in native code",
    signal.SIGINT: "Ctrl-C",
}


def describe_exit(code: int) -> str:
    """``-9`` -> "was killed by SIGKILL (...)"; ``1`` -> "exited with code 1"."""
    if code < 0:
        sig = signal.Signals(-code)
        cause = _SIGNAL_CAUSES.get(sig)
        return f"was killed by {sig.name}" + (f" ({cause})" if cause else "")
    return f"exited with code {code} (its own error is printed above)"


def wait_until_first_failure(
    procs: list[subprocess.Popen],
    deadline: float | None = None,
    stop: threading.Event | None = None,
    poll_s: float = 0.2,
) -> int | None:
    """Wait until every process has ended, one has failed, ``time.monotonic()`` passes ``deadline`` or ``stop`` is
    set. Returns the index of the first process seen failing (before the caller stops the others), or ``None``.

    Every process is polled each time: ``any(p.poll() is None ...)`` stops at the first running one and would miss
    a later one's death while the first waits for it in a collective.

    Example::

        failed = wait_until_first_failure(procs, deadline=time.monotonic() + 600)
        if failed is not None:
            ...  # name procs[failed], then stop the others
    """
    while True:
        codes = [p.poll() for p in procs]
        failed = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is not None or all(c is not None for c in codes):
            return failed
        if deadline is not None and time.monotonic() > deadline:
            return None
        if stop is not None:
            if stop.wait(poll_s):
                return None
        else:
            time.sleep(poll_s)


def failed_rank_report(strategy: Any, wait_s: float = 3.0) -> str | None:
    """Which child ranks of this process have failed, or ``None`` (no child failed, or not a script launch).

    Waits up to ``wait_s`` in total for children to finish exiting: a rank that just died may not be reaped yet.
    """
    launcher = getattr(strategy, "launcher", None)
    # Only the script launcher's children (Popen); the spawn launcher's processes report their own exit codes.
    procs = [p for p in getattr(launcher, "procs", None) or [] if isinstance(p, subprocess.Popen)]
    if not procs:
        return None
    per_node = len(procs) + 1  # the children are local ranks 1..N-1; this process is local rank 0
    node = int(getattr(strategy, "node_rank", 0) or 0)
    deadline = time.monotonic() + wait_s
    failed = []
    for local_rank, proc in enumerate(procs, start=1):
        try:
            code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            continue
        if code:
            failed.append(f"rank {node * per_node + local_rank} (pid {proc.pid}) {describe_exit(code)}")
    if not failed:
        return None
    return "A training process failed: " + "; ".join(failed) + ". The errors of the other ranks follow from it."


def on_training_failure(strategy: Any, report: bool = True) -> None:
    """What a rank does when training failed: keep its process group (others may be inside a collective) and, on
    rank 0 of a script launch, name the other rank that died first (unless ``report`` is False)."""
    mark_failed()
    if not report:
        return
    report_text = failed_rank_report(strategy)
    if report_text:
        log.error(report_text)


@dataclass(frozen=True)
class Failure:
    """A worker's error as it recorded it: its rank, when (``time.time()``) and its traceback."""

    rank: int
    at: float
    trace: str


def record_failure(folder: str | Path, rank: int) -> None:
    """Record the exception being handled as worker ``rank``'s failure, in ``folder`` (call from an ``except``
    block)."""
    record = {"rank": rank, "at": time.time(), "trace": traceback.format_exc()}
    (Path(folder) / f"rank{rank}.json").write_text(json.dumps(record))


def first_failure(folder: str | Path) -> Failure | None:
    """The earliest failure :func:`record_failure` wrote in ``folder``, or ``None``.

    The earliest is the cause: a rank that lost its peer fails only after the peer's process has closed its
    connections, which the peer does after it recorded its own error.
    """
    records = []
    for path in Path(folder).glob("rank*.json"):
        try:
            records.append(Failure(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):  # a record being written as the worker was stopped
            continue
    return min(records, key=lambda f: f.at, default=None)
