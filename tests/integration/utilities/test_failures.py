"""``wait_until_first_failure``: the one wait loop of the rank launchers (benchmarks, the tests' launcher and the
self-launched horovod's watcher), on real processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from lightning_mgpu.utilities.failures import wait_until_first_failure


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_later_process_that_dies_is_seen_while_an_earlier_one_still_runs() -> None:
    procs = [_python("import time; time.sleep(60)"), _python("import sys; sys.exit(3)")]
    try:
        start = time.monotonic()
        assert wait_until_first_failure(procs, deadline=time.monotonic() + 30) == 1
        assert time.monotonic() - start < 10 and procs[0].poll() is None  # not waited out behind the sleeper
    finally:
        procs[0].kill()
        procs[0].wait()


def test_all_ending_well_the_deadline_and_the_stop_event_each_end_the_wait_without_a_failure() -> None:
    assert wait_until_first_failure([_python("pass"), _python("pass")], deadline=time.monotonic() + 30) is None
    sleeper = _python("import time; time.sleep(60)")
    try:
        start = time.monotonic()
        assert wait_until_first_failure([sleeper], deadline=time.monotonic() + 0.5) is None
        stop = threading.Event()
        threading.Timer(0.5, stop.set).start()
        assert wait_until_first_failure([sleeper], stop=stop, poll_s=0.1) is None
        assert time.monotonic() - start < 10 and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
