"""A test session ends quietly: nothing the tests started writes to pytest's streams after pytest has closed them.

The "--- Logging error --- ... I/O operation on closed file" seen at the end of runs came from Lightning's
child-process observer: ``tests/unit/utilities/test_child_observer.py`` left a real one running (a daemon thread that
wakes every 5 s), and when it woke after the session had closed its captured stream, Lightning's logger failed to write
its "Child process ... terminated" line. A session that ends at once kills such a thread before it wakes; the real suite
spends seconds in its exit-time work, and so does the plugin below: it gives every observer thread still alive at exit
the time to wake (joining it), so a leftover one prints its error here every time rather than now and then.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.launch import run_python

_LINGER_AT_EXIT = """
import atexit
import threading


def _linger() -> None:
    # Runs once pytest has returned and closed its captured streams, as the suite's slow exit work does.
    for thread in threading.enumerate():
        if thread.name == "child-process-observer":
            thread.join(timeout=15)


atexit.register(_linger)
"""


def test_a_session_running_the_child_observer_tests_ends_without_a_logging_error(tmp_path: Path) -> None:
    (tmp_path / "linger_at_exit.py").write_text(_LINGER_AT_EXIT)
    proc = run_python(
        [
            "-m",
            "pytest",
            "-p",
            "linger_at_exit",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-q",
            "tests/unit/utilities/test_child_observer.py",
        ],
        timeout=180,
        env={"PYTHONPATH": str(tmp_path)},
    )
    output = proc.stdout + proc.stderr
    assert " passed" in output, output[-3000:]
    assert "Logging error" not in output, output[-3000:]
    assert "Exception in thread" not in output, output[-3000:]
