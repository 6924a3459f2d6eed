"""stop_child_observer against Lightning's real child-process observer, with stand-in children (no process starts)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from lightning.fabric.strategies.launchers import subprocess_script

from lightning_mgpu.utilities.child_observer import stop_child_observer


class _Child:
    """A child rank that Lightning SIGKILLed after a Ctrl-C: it has exited with -9."""

    pid = 123456
    returncode = -signal.SIGKILL

    def __init__(self) -> None:
        self.signals: list[int] = []

    def poll(self) -> int:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)


class _Launcher:
    def __init__(self, procs: list[Any]) -> None:
        self.procs = procs


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The signals the observer sends to whole processes (never delivered: this test process is the "main" one)."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(subprocess_script.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    return sent


def test_without_it_lightnings_observer_kills_the_main_process(kills: list[tuple[int, int]]) -> None:
    # The hazard itself, on the Lightning installed here: if this stops failing, the helper may no longer be needed.
    launcher = _Launcher([_Child()])
    observer = subprocess_script._ChildProcessObserver(main_pid=os.getpid(), child_processes=launcher.procs)
    assert observer._run() is True
    assert kills == [(os.getpid(), signal.SIGKILL)]


def test_it_leaves_the_observer_nothing_to_kill_and_the_launcher_every_child(kills: list[tuple[int, int]]) -> None:
    child = _Child()
    launcher = _Launcher([child])
    observer = subprocess_script._ChildProcessObserver(main_pid=os.getpid(), child_processes=launcher.procs)
    assert stop_child_observer(launcher) is True
    assert observer._run() is True and kills == [] and child.signals == []  # it ends, and signals nothing
    assert launcher.procs == [child]  # Lightning's own kill after the interrupt still reaches the child


@pytest.mark.parametrize("launcher", [None, object(), _Launcher([])], ids=["none", "no-procs", "no-children"])
def test_a_launcher_without_children_is_left_alone(launcher: Any) -> None:
    assert stop_child_observer(launcher) is False


def test_paused_during_a_block_and_watching_again_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Against Lightning's real observer: inside the block it finds nothing to kill; after a successful block the
    children are watched again (by a new observer when the paused one ended); after a failed block it stays idle
    (the rank is exiting and says why itself)."""
    import threading

    from lightning_mgpu.utilities.child_observer import child_observer_paused

    killed: list[int] = []
    monkeypatch.setattr(subprocess_script._ChildProcessObserver, "_terminate_all", lambda self: killed.append(1))
    # The observer that _keep_watching starts is a real thread. With Lightning's 5 s period it outlived this test: it
    # woke after the test (with _terminate_all restored, on a stand-in child), or after pytest had closed its captured
    # stream, and Lightning's logger wrote "--- Logging error --- ... I/O operation on closed file" at the end of the
    # run. A short period lets the thread itself do the check within the test, which then joins it.
    monkeypatch.setattr(subprocess_script._ChildProcessObserver.__init__, "__defaults__", (0.01,))

    class Launcher:
        procs: list = []

    for fails in (False, True):
        killed.clear()
        launcher = Launcher()
        child = _Exited(3)  # what the observer reads of a child: poll() and returncode
        launcher.procs = [child]
        observer = subprocess_script._ChildProcessObserver(main_pid=os.getpid(), child_processes=launcher.procs)
        try:
            with child_observer_paused(launcher):
                observer._finished = observer._run()  # it wakes inside the block: nothing to watch, so it ends
                assert observer._finished and not killed
                assert launcher.procs == [child]  # Lightning's own kill still reaches it
                if fails:
                    raise RuntimeError("rendezvous")
        except RuntimeError:
            pass
        watchers = [t for t in threading.enumerate() if getattr(t, "_child_processes", None) is launcher.procs]
        if fails:
            assert watchers == [] and not killed
        else:
            (watcher,) = watchers  # a new observer on the same children, which sees the dead one and ends
            watcher.join(timeout=10)
            assert not watcher.is_alive() and killed == [1]


class _Exited:
    """A child process that has exited with ``code``, as far as Lightning's observer looks at one."""

    pid = 12345

    def __init__(self, code: int) -> None:
        self.returncode = code

    def poll(self) -> int:
        return self.returncode
