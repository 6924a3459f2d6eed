"""Helpers to run scripts in fresh processes with a hard timeout and readable failures.

Every process the tests start goes through this module (``tests/unit/test_launch_rule.py`` scans tests/ for any other
launch), and every launch here checks the exit status it ends with: 0 unless the test names the code it expects
(``expect=130``, ``expect=(1, 2)``) or :data:`FAILS` (any non-zero code, for a launch that must be refused; the test
then checks what it said). A fit that finishes and then exits non-zero (an abort at interpreter exit) fails its test.

- :func:`run`, :func:`run_python`, :func:`run_command`: launch, wait, check.
- :func:`start` then :func:`finish` (or :func:`check_exit` once the test has the code): a process the test acts on
  while it runs (a signal, a server, a pair of nodes).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

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


class _Fails:
    """The type of :data:`FAILS`."""

    def __repr__(self) -> str:
        return "any non-zero code"


#: ``expect=FAILS``: the launch must fail, whatever its non-zero code (a refusal; the test checks what it said).
FAILS = _Fails()

#: What a launch must exit with: a code, one of several codes, or :data:`FAILS`.
Expect = int | tuple[int, ...] | _Fails


def exit_ok(returncode: int | None, expect: Expect) -> bool:
    """Whether ``returncode`` is what ``expect`` asks for (``None``, still running, never is)."""
    if returncode is None:
        return False
    if isinstance(expect, _Fails):
        return returncode != 0
    return returncode in (expect if isinstance(expect, tuple) else (expect,))


def check_exit(what: object, returncode: int | None, expect: Expect = 0, output: str = "") -> None:
    """Fail unless ``returncode`` is what ``expect`` asks for, naming the launch and ending in its output."""
    if not exit_ok(returncode, expect):
        raise AssertionError(f"{what} exited {returncode}, expected {expect!r}\n{output[-12000:]}")


def run(
    cmd: list[str],
    timeout: float = 300,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    expect: Expect = 0,
    environ: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """Run ``cmd`` (text output captured) from the repo root and check its exit status against ``expect``; raise with
    the captured output on a timeout or another status.

    Args:
        env: added to :func:`launch_env`, the environment every launch gets.
        environ: the whole environment instead (a test of what a process does without the launch environment).
    """
    full_env = environ if environ is not None else launch_env(env)
    try:
        proc = subprocess.run(
            cmd, cwd=cwd or REPO_ROOT, env=full_env, capture_output=True, text=True, timeout=timeout, input=input
        )
    except subprocess.TimeoutExpired as err:
        raise AssertionError(
            f"{cmd} timed out after {timeout}s\n--- stdout\n{err.stdout}\n--- stderr\n{err.stderr}"
        ) from None
    check_exit(cmd, proc.returncode, expect, f"--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def run_python(
    args: list[str],
    timeout: float = 300,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    expect: Expect = 0,
) -> subprocess.CompletedProcess:
    """:func:`run` of ``python ARGS`` (this interpreter)."""
    return run([sys.executable, *args], timeout=timeout, env=env, cwd=cwd, expect=expect)


def start(
    cmd: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    environ: dict[str, str] | None = None,
    **popen: Any,
) -> subprocess.Popen:
    """Start ``cmd`` from the repo root with the launch environment (``env`` on top, or ``environ`` instead); the test
    ends it with :func:`finish`, or checks its code with :func:`check_exit` (``subprocess.Popen``'s other arguments
    pass through)."""
    full_env = environ if environ is not None else launch_env(env)
    return subprocess.Popen(cmd, cwd=cwd or REPO_ROOT, env=full_env, **popen)


def finish(proc: subprocess.Popen, timeout: float, expect: Expect = 0, what: object = None) -> str:
    """Wait for a process from :func:`start` (and its output, if piped) and check its exit status against ``expect``.

    On a timeout its process group (its session, when started with ``start_new_session=True``) is stopped, SIGTERM
    then SIGKILL after 20 s, and the test fails as a hang. Returns stdout (with stderr after it when apart), or "".
    """
    what = what if what is not None else proc.args
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"{what} did not finish within {timeout}s (a hang)\n{_text(out, err)[-8000:]}") from None
    text = _text(out, err)
    check_exit(what, proc.returncode, expect, text)
    return text


def _text(out: str | bytes | None, err: str | bytes | None) -> str:
    parts = [p.decode(errors="replace") if isinstance(p, bytes) else p for p in (out, err) if p]
    return "\n".join(parts)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process's group (launchers stop their workers on it), then SIGKILL what is left after 20 s."""
    try:
        group = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    if group == os.getpgid(0):  # not a group of its own (the test process's is pytest's): the process alone
        proc.kill()
        return
    os.killpg(group, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    # Whatever of the group outlived the leader or ignored SIGTERM would hold the output pipe open.
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


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


def spawn_ranks(fn: Any, args: tuple, nprocs: int) -> None:
    """``fn(rank, *args)`` in ``nprocs`` spawned processes (``torch.multiprocessing``), waiting for all of them: torch's
    join raises unless every one of them exits 0 (``ProcessRaisedException`` / ``ProcessExitedException`` naming it)."""
    import torch.multiprocessing as mp

    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="spawn")


def run_command(cmd: list[str], timeout: float, expect: Expect = 0) -> tuple[int, str, float]:
    """Run ``cmd`` from the repo root in its own session, check its exit status against ``expect``; on timeout stop
    its whole process group and fail.

    Returns ``(exit code, stdout+stderr, seconds)``. Launchers (horovodrun, torchrun) stop their workers on
    SIGTERM; SIGKILL follows after 20 s so that nothing is left behind.
    """
    began = time.monotonic()
    proc = start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out = finish(proc, timeout, expect)
    return proc.returncode, out, time.monotonic() - began
