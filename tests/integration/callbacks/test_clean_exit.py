"""CleanExit after a Ctrl-C under Lightning's ``ddp`` launcher: rank 0 exits with its own code and runs its exit
handlers to the end, instead of being SIGKILLed by Lightning's child-process observer while it exits.

The in-process tests of the helper, against Lightning's real observer, are in
``tests/unit/utilities/test_child_observer.py``.
"""

from __future__ import annotations

import pytest

from tests.helpers.launch import run_python

RUNNER = ["-m", "tests.integration.runners.run_interrupted_exit"]


@pytest.mark.timeout(180)
def test_an_interrupted_rank_zero_finishes_its_exit_handlers_and_exits_with_its_own_code() -> None:
    # Lightning's exit after a KeyboardInterrupt is sys.exit(1); -9 is its observer's SIGKILL (train.py turns 1 into
    # 130).
    proc = run_python(RUNNER, timeout=150, expect=1, env={"OMP_NUM_THREADS": "1"})
    assert "EXIT HANDLERS DONE" in proc.stdout, proc.stdout[-3000:]
    assert "Forcefully terminating all other processes" not in proc.stderr + proc.stdout
