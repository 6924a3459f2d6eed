"""Start ranks as a launcher would and wait for all of them; the first failure stops every one.

The one launcher of the bundle's tests and benchmarks: each process writes its output to a file of its own (none
blocks on a full pipe), runs in a session of its own, and once one fails, or the timeout passes, every process group is
killed (a surviving rank would wait for the dead one in a collective, and a spawn launcher's ranks go with it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

__all__ = ["ProcessFailure", "launch_processes", "rendezvous_env"]


class ProcessFailure(RuntimeError):
    """A launched process exited non-zero, or the launch ran past its timeout; every process was stopped."""


def rendezvous_env(rank: int, world: int, port: int) -> dict[str, str]:
    """What ``torchrun`` gives rank ``rank`` of ``world`` on one node: Lightning's and ``init_process_group("env://")``'s
    variables."""
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "NODE_RANK": "0",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
    }


def launch_processes(
    args: Sequence[str],
    envs: Sequence[Mapping[str, str]],
    *,
    timeout: float,
    cwd: str | os.PathLike | None = None,
    passthrough: Collection[int] = (),
    what: str = "launch",
    tail_lines: int = 12,
) -> list[str]:
    """Run ``python ARGS`` once per entry of ``envs`` (each the process's whole environment) and wait for all.

    Args:
        args: the arguments after ``python``.
        envs: one environment per process, in rank order.
        timeout: seconds for the whole launch.
        cwd: the working directory of every process.
        passthrough: indices whose output goes to this process's stdout instead of a file (a benchmark's rank 0,
            whose progress lines a parent follows).
        what: names the launch in the error.
        tail_lines: lines of the failing process's output quoted in the error.

    Returns:
        Each process's output, in order (``""`` for those in ``passthrough``).

    Raises:
        ProcessFailure: a process exited non-zero (the first one seen failing is named, with its last lines), or
            the launch ran past ``timeout``.
    """
    # Imported here: a parent that only launches (benchmarks/run.py) need not import torch.
    from lightning_mgpu.utilities.failures import wait_until_first_failure

    with tempfile.TemporaryDirectory() as tmp:
        procs, logs = [], []
        for i, env in enumerate(envs):
            log = None if i in passthrough else open(Path(tmp) / f"process{i}.log", "w+")  # noqa: SIM115  (closed below)
            procs.append(
                subprocess.Popen(
                    [sys.executable, *args],
                    cwd=cwd,
                    env=dict(env),
                    stdout=log,
                    stderr=subprocess.STDOUT if log else None,
                    start_new_session=True,
                )
            )
            logs.append(log)
        deadline = time.monotonic() + timeout
        try:
            failed = wait_until_first_failure(procs, deadline)  # seen failing before the others are killed
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)  # the process and whatever it started
                p.wait()
        outputs = []
        for log in logs:
            if log is None:
                outputs.append("")
                continue
            log.seek(0)
            outputs.append(log.read())
            log.close()
    if failed is not None or any(p.returncode != 0 for p in procs):
        i = failed if failed is not None else 0
        why = f"rank {i} exited with {procs[i].returncode}" if failed is not None else f"ran past {timeout:.0f} s"
        tail = "\n".join(outputs[i].strip().splitlines()[-tail_lines:]) or "(its output is above)"
        raise ProcessFailure(f"{what}: {why}\n{tail}")
    return outputs
