"""Every process the tests launch goes through ``tests/helpers/launch.py``, which checks the status it exits with.

Issue 56: a fit that finished and then aborted at interpreter exit passed any test that looked only at its output.
The helpers check every exit status (0 unless the test names the code it expects), so a launch that bypasses them is
a launch whose status nobody may check. This scan finds them: a call that starts a process (``subprocess``, ``os``'s
``system``/``fork``/``spawn*``/``exec*``, ``multiprocessing``'s ``Process``, torch's ``spawn``/``start_processes``,
``asyncio``'s subprocesses) anywhere under tests/ but the helper module, unless :data:`NOT_A_FIT` names it with the
reason it is not a fit. A file that keeps a process with ``start`` also ends it with ``finish`` or ``check_exit``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
HELPER = TESTS / "helpers" / "launch.py"

# Calls that start a process, by the full dotted name they resolve to.
LAUNCHES = {
    *(
        f"subprocess.{n}"
        for n in ("run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput")
    ),
    *(f"os.{n}" for n in ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp")),
    *(f"os.{n}" for n in ("spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe")),
    *(f"os.{n}" for n in ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe")),
    "multiprocessing.Process",
    "multiprocessing.Pool",
    "torch.multiprocessing.spawn",
    "torch.multiprocessing.start_processes",
    "torch.multiprocessing.Process",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
    "pty.spawn",
}

#: Launches that are not fits, each with why its exit status is not the helpers' to check: (file, call) -> reason.
NOT_A_FIT: dict[tuple[str, str], str] = {
    ("helpers/ray_cluster.py", "subprocess.run"): "the `ray start`/`ray stop` CLI and a node-count probe; `_ray` raises"
    " on a non-zero exit, the probe counts a failure as no node and the start-up then fails in bound",
    ("helpers/browser.py", "subprocess.Popen"): "headless Chromium, a server the test stops",
    ("helpers/netns.py", "subprocess.run"): "`ip` (check=True) and its clean-up",
    ("helpers/shm.py", "subprocess.run"): "an `unshare` probe: its exit status is the answer",
    ("integration/reliability/conftest.py", "subprocess.run"): "`mount`/`umount` of the disk-full fixtures",
    ("integration/utilities/test_failures.py", "subprocess.Popen"): "`python -c` stand-ins whose exits (0, 3, still"
    " running) are what wait_until_first_failure is tested on",
    ("integration/runners/run_save_loop.py", "os.fork"): "the runner's saving child, SIGKILLed on purpose mid-save",
}


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def launches_in(source: str) -> list[tuple[int, str]]:
    """``(line, full dotted name)`` of every call in ``source`` that starts a process (through the import aliases the
    module made: ``import torch.multiprocessing as mp``, ``from subprocess import Popen``)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (name := _dotted(node.func)) is None:
            continue
        head, _, rest = name.partition(".")
        full = ".".join(filter(None, [aliases.get(head, head), rest]))
        if full in LAUNCHES:
            found.append((node.lineno, full))
    return found


def _calls(source: str) -> set[str]:
    return {name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call) and (name := _dotted(node.func))}


def _files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p != HELPER)


def test_every_launch_goes_through_the_checked_helpers() -> None:
    bypass = []
    used = set()
    for path in _files():
        rel = path.relative_to(TESTS).as_posix()
        for line, name in launches_in(path.read_text()):
            if (rel, name) in NOT_A_FIT:
                used.add((rel, name))
            else:
                bypass.append(f"tests/{rel}:{line}: {name}")
    assert not bypass, (
        "launches that bypass tests/helpers/launch.py (use run/run_python/run_command, or start + finish, which check"
        " the exit status; a launch that is not a fit goes into NOT_A_FIT with its reason):\n" + "\n".join(bypass)
    )
    assert used == set(NOT_A_FIT), f"NOT_A_FIT entries that match nothing any more: {set(NOT_A_FIT) - used}"


def _imports_start(source: str) -> bool:
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "tests.helpers.launch"
        and any(alias.name == "start" for alias in node.names)
        for node in ast.walk(ast.parse(source))
    )


def test_a_process_kept_with_start_is_ended_with_finish_or_check_exit() -> None:
    missing = []
    for path in _files():
        source = path.read_text()
        if _imports_start(source) and "start" in _calls(source) and not _calls(source) & {"finish", "check_exit"}:
            missing.append(path.relative_to(TESTS).as_posix())
    assert not missing, f"start() without finish() or check_exit() (its exit status is never checked): {missing}"


@pytest.mark.parametrize(
    "source",
    [
        "import subprocess\nsubprocess.run(['x'])\n",
        "import subprocess as sp\nsp.Popen(['x'])\n",
        "from subprocess import check_output as out\nout(['x'])\n",
        "import torch.multiprocessing as mp\nmp.start_processes(f, nprocs=2)\n",
        "import os\nos.system('x')\n",
        "import multiprocessing\nmultiprocessing.Process(target=f).start()\n",
    ],
    ids=["run", "alias", "from-import", "torch-mp", "os-system", "multiprocessing"],
)
def test_the_scan_finds_a_launch_however_it_is_imported(source: str) -> None:
    assert len(launches_in(source)) == 1, source


def test_the_scan_leaves_the_helpers_and_other_calls_alone() -> None:
    source = (
        "from tests.helpers.launch import run_python, start, finish\nimport os\n"
        "run_python(['-c', 'pass'])\nfinish(start(['x']), 10)\nos.path.join('a')\nproc.run()\n"
    )
    assert launches_in(source) == []
