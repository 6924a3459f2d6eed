"""Launching a benchmark's ranks, once for every benchmark: the rendezvous, the output, the first failure stops all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_env(env: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``env`` (default ``os.environ``) with ``extra`` and the repository root first on ``PYTHONPATH``, so that a child
    ``python -m benchmarks.X`` finds this package, not the ``benchmarks`` package FairScale installs into site-packages."""
    out = {**(os.environ if env is None else env), **extra}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), out.get("PYTHONPATH")]))
    return out


class RankFailure(RuntimeError):
    """A launched rank exited non-zero, or the launch ran past its timeout; every rank was stopped."""


def launch_ranks(
    args: list[str],
    world: int,
    timeout: float = 900.0,
    env: dict[str, str] | None = None,
    rendezvous: bool = True,
    what: str = "benchmark",
    capture_rank0: bool = False,
) -> list[str]:
    """Run ``python ARGS`` as ``world`` ranks on this machine, as a launcher would, and wait for all of them.

    The repository root leads ``PYTHONPATH`` (:func:`repo_env`).

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
    # Imported here: run.py's process, which imports this module, need not import the library.
    from lightning_mgpu.utilities.failures import wait_until_first_failure

    port = _free_port() if rendezvous else None
    with tempfile.TemporaryDirectory() as tmp:
        procs, logs = [], []
        for rank in range(world):
            rank_env = repo_env({**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})
            if port is not None:
                rank_env |= {
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    "NODE_RANK": "0",
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(world),
                }
            log = None if rank == 0 and not capture_rank0 else open(Path(tmp) / f"rank{rank}.log", "w+")  # noqa: SIM115  (closed below)
            procs.append(
                subprocess.Popen(
                    [sys.executable, *args], env=rank_env, stdout=log, stderr=subprocess.STDOUT if log else None
                )
            )
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


def run_ranks(module: str, args: list[str], world: int, *, what: str, **launch: Any) -> list[Any]:
    """Launch ``python -m MODULE ARGS --worker-out DIR`` as ``world`` ranks (:func:`launch_ranks`, whose keyword
    arguments ``launch`` passes on) and return what each rank wrote with :func:`write_rank_result`, by rank.

    Raises:
        RankFailure: a rank failed, the launch ran past its timeout, or a rank finished without writing its result.
    """
    with tempfile.TemporaryDirectory() as tmp:
        launch_ranks(["-m", module, *args, "--worker-out", tmp], world, what=what, **launch)
        paths = [Path(tmp) / f"rank{r}.json" for r in range(world)]
        missing = [p.stem for p in paths if not p.is_file()]
        if missing:
            raise RankFailure(f"{what}: {', '.join(missing)} finished without writing a result")
        return [json.loads(p.read_text()) for p in paths]


def write_rank_result(folder: Path, value: Any) -> None:
    """A launched rank's result for :func:`run_ranks` (the rank from ``RANK``, as :func:`launch_ranks` sets it)."""
    (Path(folder) / f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(value))


def _free_port() -> int:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    return find_free_network_port()
