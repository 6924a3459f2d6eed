"""Launching a benchmark's ranks, once for every benchmark: the rendezvous, the output, the first failure stops all."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from lightning_mgpu.testing.processes import ProcessFailure

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_env(env: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``env`` (default ``os.environ``) with ``extra`` and the repository root first on ``PYTHONPATH``, so that a child
    ``python -m benchmarks.X`` finds this package, not the ``benchmarks`` package FairScale installs into
    site-packages."""
    out = {**(os.environ if env is None else env), **extra}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), out.get("PYTHONPATH")]))
    return out


def launch_ranks(
    args: list[str],
    world: int,
    timeout: float = 900.0,
    env: dict[str, str] | None = None,
    rendezvous: bool = True,
    what: str = "benchmark",
    capture_rank0: bool = False,
) -> list[str]:
    """Run ``python ARGS`` as ``world`` ranks on this machine, as a launcher would, and wait for all of them
    (:func:`lightning_mgpu.testing.launch_processes`: the first failure, or ``timeout`` passing, kills every rank).

    The repository root leads ``PYTHONPATH`` (:func:`repo_env`). Each rank gets ``MASTER_ADDR``/``MASTER_PORT`` on a
    free port, ``RANK``, ``LOCAL_RANK``, ``NODE_RANK=0`` and ``WORLD_SIZE``, unless ``rendezvous`` is False. Rank 0's
    output passes through (the ``round i/N`` lines ``benchmarks/run.py`` follows, and its errors) unless
    ``capture_rank0``; the others' goes to files.

    Returns:
        Each rank's captured output (rank 0's: ``""`` unless ``capture_rank0``).

    Raises:
        ProcessFailure: with the failing rank's last lines.
    """
    # Imported here: run.py's process, which imports this module, need not import the library's heavier parts.
    from lightning_mgpu.testing.processes import launch_processes, rendezvous_env

    port = _free_port() if rendezvous else None
    base = repo_env({**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})
    envs = [base | (rendezvous_env(rank, world, port) if port is not None else {}) for rank in range(world)]
    return launch_processes(args, envs, timeout=timeout, passthrough=() if capture_rank0 else (0,), what=what)


def run_ranks(module: str, args: list[str], world: int, *, what: str, **launch: Any) -> list[Any]:
    """Launch ``python -m MODULE ARGS --worker-out DIR`` as ``world`` ranks (:func:`launch_ranks`, whose keyword
    arguments ``launch`` passes on) and return what each rank wrote with :func:`write_rank_result`, by rank.

    Raises:
        ProcessFailure: a rank failed, the launch ran past its timeout, or a rank finished without writing its result.
    """
    with tempfile.TemporaryDirectory() as tmp:
        launch_ranks(["-m", module, *args, "--worker-out", tmp], world, what=what, **launch)
        paths = [Path(tmp) / f"rank{r}.json" for r in range(world)]
        missing = [p.stem for p in paths if not p.is_file()]
        if missing:
            raise ProcessFailure(f"{what}: {', '.join(missing)} finished without writing a result")
        return [json.loads(p.read_text()) for p in paths]


def write_rank_result(folder: Path, value: Any) -> None:
    """A launched rank's result for :func:`run_ranks` (the rank from ``RANK``, as :func:`launch_ranks` sets it)."""
    (Path(folder) / f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(value))


def finish_rank(folder: Path, value: Any) -> NoReturn:
    """The last thing a launched rank does: write its result (:func:`write_rank_result`), leave the process group, and
    end the process there."""
    write_rank_result(folder, value)
    # A gloo rank can still abort at interpreter exit after its work (seen once in a full CI run, in this suite's
    # sharded_checkpoint FSDP2 arm): end it now, as the bundle's spawn launcher ends its workers.
    from lightning_mgpu.utilities.process_group import end_after_success

    end_after_success()


def _free_port() -> int:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    return find_free_network_port()
