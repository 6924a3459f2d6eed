"""Helpers to run scripts in fresh processes with a hard timeout and readable failures."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(REPO_ROOT / "examples" / "train.py")


def import_train_script() -> ModuleType:
    """``examples/train.py`` imported as a module, for in-process checks of its argument parsing (its ``main`` runs
    only under ``__main__``): a fresh interpreter per case cost 6 s of imports for what ``parse_args`` decides alone."""
    spec = importlib.util.spec_from_file_location("train_script_under_test", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Rendezvous variables a launched job must choose for itself, never inherit from the test process.
RENDEZVOUS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
)


def clean_environ() -> dict[str, str]:
    """``os.environ`` without rendezvous variables (a test that wants one passes it explicitly)."""
    return {k: v for k, v in os.environ.items() if k not in RENDEZVOUS}


def launch_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process a test launches: :func:`clean_environ`, unbuffered output and ``extra``, with the
    repository first on ``PYTHONPATH`` (the launched runners and helpers import ``tests.``)."""
    env = {**clean_environ(), "PYTHONUNBUFFERED": "1", **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, children first (from /proc; empty once it is gone)."""
    found: list[int] = []
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return found
    for child in children:
        found += [child, *descendants(child)]
    return found


def processes_naming(marker: str) -> list[int]:
    """Live processes, other than this one, whose command line holds ``marker`` (a run's unique output folder: a job's
    workers re-exec its command line). Zombies have exited and do not count."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, its process group and every descendant.

    torchrun starts each worker in a session of its own, so killing the agent's group alone leaves them orphaned.
    """
    for victim in [*descendants(pid), pid]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_python(
    args: list[str],
    timeout: float = 300,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` from the repo root; raise with the captured output on a timeout, or a failure if
    ``check``."""
    full_env = launch_env(env)
    cmd = [sys.executable, *args]
    try:
        proc = subprocess.run(cmd, cwd=cwd or REPO_ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(
            f"{cmd} timed out after {timeout}s\n--- stdout\n{err.stdout}\n--- stderr\n{err.stderr}"
        ) from None
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{cmd} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


THEN = "--then"


def split_runs(argv: list[str]) -> list[list[str]]:
    """A runner's command line ``A --then B --then C`` -> ``[A, B, C]``: several runs in one launch, one after the
    other in the same processes. A launch is mostly imports (5-8 s of CPU a process here), a small run is not."""
    runs: list[list[str]] = [[]]
    for arg in argv:
        if arg == THEN:
            runs.append([])
        else:
            runs[-1].append(arg)
    return runs


def join_runs(runs: list[list[str]]) -> list[str]:
    """The inverse of :func:`split_runs`: ``[A, B, C]`` -> ``A --then B --then C``."""
    return [arg for i, run in enumerate(runs) for arg in ([THEN] if i else []) + run]


def run_parity(
    out: Path, *extra: str, timeout: float = 300, env: dict[str, str] | None = None
) -> dict[int, dict[str, torch.Tensor]]:
    """Run ``tests.integration.runners.run_parity`` and return each rank's final parameters."""
    return run_parity_sequence([(out, *extra)], timeout=timeout, env=env)[0]


def run_parity_sequence(
    runs: list[tuple[Path | str, ...]], timeout: float = 300, env: dict[str, str] | None = None
) -> list[dict[int, dict[str, torch.Tensor]]]:
    """Several ``run_parity`` runs, each ``(out, *extra)``, one after the other in one launch (same ``--devices``);
    returns each run's per-rank final parameters. A later run may resume from an earlier run's ``final.ckpt``."""
    argv = join_runs([["--out", str(out), *extra] for out, *extra in runs])
    run_python(["-m", "tests.integration.runners.run_parity", *argv], timeout=timeout, env=env)
    return [parity_params(Path(out)) for out, *_ in runs]


def run_parity_here(out: Path, *extra: str) -> dict[int, dict[str, torch.Tensor]]:
    """``run_parity`` in this process, for runs on one device (no process group): it saves a launch."""
    from tests.integration.runners.run_parity import main

    main(["--out", str(out), *extra])
    return parity_params(out)


def parity_params(out: Path) -> dict[int, dict[str, torch.Tensor]]:
    """Each rank's final parameters that a ``run_parity`` run wrote into ``out``."""
    return {int(p.stem.removeprefix("params_rank")): torch.load(p) for p in sorted(out.glob("params_rank*.pt"))}


def launch_processes(
    args: list[str], rank_envs: list[dict[str, str]], timeout: float = 300, env: dict[str, str] | None = None
) -> list[str]:
    """:func:`lightning_mgpu.testing.launch_processes` from the repository root, each process's environment being a
    clean one with ``env`` and its entry of ``rank_envs`` on top.

    Raises:
        ProcessFailure: a process exited non-zero, or the launch ran past ``timeout``; with its last 80 lines.
    """
    from lightning_mgpu.testing.processes import launch_processes as launch

    base = launch_env(env)
    what = f"{args} as {len(rank_envs)} processes"
    return launch(args, [{**base, **e} for e in rank_envs], timeout=timeout, cwd=REPO_ROOT, what=what, tail_lines=80)


def run_command(cmd: list[str], timeout: float, expect_ok: bool = True) -> tuple[int, str, float]:
    """Run ``cmd`` from the repo root in its own session; on timeout stop its whole process group and fail.

    Returns ``(exit code, stdout+stderr, seconds)``. Launchers (horovodrun, torchrun) stop their workers on
    SIGTERM; SIGKILL follows after 20 s so that nothing is left behind.
    """
    env = launch_env()
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        raise AssertionError(f"{cmd} did not finish within {timeout}s (a hang)\n{out[-8000:]}") from None
    elapsed = time.monotonic() - start
    if expect_ok and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}\n{out[-8000:]}")
    return proc.returncode, out, elapsed
