"""Launching a benchmark's ranks, once for every benchmark: the rendezvous, the output, the first failure stops all."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional


class RankFailure(RuntimeError):
    """A launched rank exited non-zero, or the launch ran past its timeout; every rank was stopped."""


def launch_ranks(
    args: list[str],
    world: int,
    timeout: float = 900.0,
    env: Optional[dict[str, str]] = None,
    rendezvous: bool = True,
    what: str = "benchmark",
    capture_rank0: bool = False,
) -> list[str]:
    """Run ``python ARGS`` as ``world`` ranks on this machine, as a launcher would, and wait for all of them.

    Each rank gets ``MASTER_ADDR``/``MASTER_PORT`` on a free port, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK=0`` and
    ``WORLD_SIZE`` (Lightning's and ``init_process_group("env://")``'s variables), unless ``rendezvous`` is False.
    Rank 0's output passes through (the ``round i/N`` lines ``benchmarks/run.py`` follows, and its errors) unless
    ``capture_rank0``; the others' goes to files, so no rank blocks on a full pipe. Once one rank fails, or ``timeout`` passes, every rank
    is killed: the others would wait for it in a collective.

    Returns:
        Each rank's captured output (rank 0's: ``""`` unless ``capture_rank0``).

    Raises:
        RankFailure: with the failing rank's last lines.
    """
    port = _free_port() if rendezvous else None
    with tempfile.TemporaryDirectory() as tmp:
        procs, logs = [], []
        for rank in range(world):
            rank_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
            if port is not None:
                rank_env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": "0", "RANK": str(rank),
                             "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)}  # fmt: skip
            log = None if rank == 0 and not capture_rank0 else open(Path(tmp) / f"rank{rank}.log", "w+")  # noqa: SIM115  (closed below)
            procs.append(subprocess.Popen([sys.executable, *args], env=rank_env, stdout=log, stderr=subprocess.STDOUT if log else None))
            logs.append(log)
        deadline = time.monotonic() + timeout
        try:
            failed = wait_until_first_failure(procs, deadline)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
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
        rank = failed if failed is not None else 0
        why = f"rank {rank} exited with {procs[rank].returncode}" if failed is not None else f"ran past {timeout:.0f} s"
        tail = "\n".join(outputs[rank].strip().splitlines()[-12:]) or "(its output is above)"
        raise RankFailure(f"{what}: {why}\n{tail}")
    return outputs


def wait_until_first_failure(procs: list[subprocess.Popen], deadline: float) -> Optional[int]:
    """Wait until every process has ended, one has failed, or ``time.monotonic()`` passes ``deadline``. Returns the
    index of the first process seen failing (before the caller stops the others), or ``None``. Every process is polled
    each time: ``any(p.poll() is None ...)`` would stop at the first running one and miss a later one's death."""
    while True:
        codes = [p.poll() for p in procs]
        failed = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is not None or all(c is not None for c in codes) or time.monotonic() > deadline:
            return failed
        time.sleep(0.2)


def _free_port() -> int:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    return find_free_network_port()
