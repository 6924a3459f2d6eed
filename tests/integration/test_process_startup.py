"""The test session's start-up hook (``tests/helpers/process_startup.py``) reaches the processes the tests launch, and
no other: a launch that lost it would still pass, a quarter slower, so this is where that shows. ``import matplotlib``
needs the test venv (the ``dashboard`` extra)."""

from __future__ import annotations

import gc
import os
import sys

from tests.helpers import process_startup
from tests.helpers.launch import run, run_python

# The threshold the process started with; whether importing Lightning imported matplotlib (through torchmetrics), and
# whether matplotlib still imports when asked; what is frozen once the exit handlers have run.
_PROBE = (
    "import atexit, gc, sys; threshold = gc.get_threshold()[0]; import lightning.pytorch;"
    "plotted = 'matplotlib' in sys.modules; import matplotlib.pyplot;"
    "atexit._run_exitfuncs(); print(threshold, int(plotted), gc.get_freeze_count())"
)


def test_a_launched_process_starts_tuned_and_collects_at_exit() -> None:
    threshold, plotted, frozen = run_python(["-c", _PROBE]).stdout.split()
    assert int(threshold) == process_startup.THRESHOLD[0], (
        "the venv's hook did not run: scripts/setup_env.sh installs it"
    )
    assert plotted == "0", "torchmetrics imported matplotlib"
    assert int(frozen) > 0, "the exit step did not run"
    assert gc.get_threshold() == process_startup.THRESHOLD, "the pytest process itself runs tuned (tests/conftest.py)"


def test_without_the_variable_a_process_is_left_as_python_starts_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LIGHTNING_MGPU_TEST_STARTUP"}
    out = run([sys.executable, "-c", _PROBE], environ=env, timeout=120).stdout.split()
    # Untouched: the default threshold, torchmetrics imports matplotlib (so the check above can fail), nothing frozen.
    assert int(out[0]) != process_startup.THRESHOLD[0] and out[1] == "1" and int(out[2]) == 0, out
