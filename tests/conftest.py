"""Shared pytest configuration.

Two tiers, as folders that mirror the package:

- ``tests/unit/``: in-process tests. They start no process (``tests/unit/conftest.py`` fails one that does) and run
  no multi-rank fit: ``bash scripts/test.sh tests/unit`` is the fast loop.
- ``tests/integration/``: everything that launches: gloo, horovod, Ray, torchrun, Chromium, worker pools. Every test
  there gets the ``integration`` marker, which the scheduler (``tests/helpers/scheduling.py``) orders by.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.launch import RENDEZVOUS
from tests.helpers.scheduling import last_ray_user, make_scheduler, order_for_workers, order_serially

# The data tests' session fixtures (the Ray connection, the reference cache), registered once for both tiers: a fixture
# imported into two conftest files would be two fixtures, and each tier's data tests would build its own.
pytest_plugins = ["tests.helpers.data_fixtures"]

# Every process of the session starts with the collector tuned for short torch+Lightning processes (a quarter of each
# launch's time: tests/helpers/process_startup.py). The venv's hook runs it in each child that inherits this variable;
# this process had no variable to find at its start, so it runs it here.
_STARTUP = str(Path(__file__).parent / "helpers" / "process_startup.py")
if os.environ.get("LIGHTNING_MGPU_TEST_STARTUP") != _STARTUP:
    os.environ["LIGHTNING_MGPU_TEST_STARTUP"] = _STARTUP
    import tests.helpers.process_startup  # noqa: F401  (importing it runs it)

# Keep every test off the network and quiet.
os.environ.setdefault("NEPTUNE_MODE", "debug")
# Ray's token authentication (on by default for `ray start`), with a token made for this session: set before Ray is
# first imported (it reads these then), and inherited by every Ray process the tests start or connect from.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# A shell starts background jobs (`cmd &`) with SIGINT ignored, and the children we launch would inherit that:
# Python then installs no KeyboardInterrupt handler and the Ctrl-C tests would test nothing. Take it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--extended",
        action="store_true",
        help="also run the extended tier: further variants of behaviours the default tier checks (about 10 minutes "
        "more on 2 cores; before a release, and after a change to what they cover)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    # The default tier is what CI runs (under 30 minutes on 2 cores); the extended tier adds variants of what it
    # checks: another launcher for the same failure path, a benchmark's own run. Skipped, not deselected: the summary
    # counts them.
    skip_extended = pytest.mark.skip(reason="extended tier: run with --extended")
    extended = config.getoption("--extended")
    integration = Path(__file__).parent / "integration"
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if "extended" in item.keywords and not extended:
            item.add_marker(skip_extended)
        if item.path.is_relative_to(integration):
            item.add_marker(pytest.mark.integration)
        elif item.get_closest_marker("integration"):
            raise pytest.UsageError(
                f"{item.nodeid} is marked integration: move it to tests/integration/ (its tier is its folder)."
            )
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        order_for_workers(items)
    else:
        order_serially(items)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, called in its controller
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return make_scheduler(config, log)


@pytest.fixture(scope="session")
def ray_cluster():
    """One real two-node Ray cluster per test session (``ray start`` twice, 1 CPU per node), stopped at the end.

    Every Ray user in the tests shares it: the data tests connect to it, and ``--launcher ray`` runs join it.
    """
    from tests.helpers.runif import require_or_skip

    require_or_skip("ray")
    from tests.helpers.ray_cluster import two_node_ray_cluster

    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(two_node_ray_cluster())
        _STOP_RAY_CLUSTER.append(stack.close)  # for pytest_runtest_teardown, after the last test that uses it
        try:
            yield cluster
        finally:
            _STOP_RAY_CLUSTER.clear()  # the stack closes here if it is still open (a second close does nothing)


#: Stops the running session cluster; empty when there is none.
_STOP_RAY_CLUSTER: list[Callable[[], None]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Stop the session's Ray cluster once the last test that uses it is done, not at the end of the session.

    Its tests run early on one worker under xdist (one work unit, handed out first), and the cluster's idle daemons
    would otherwise take 4 % of this 2-core machine from the tests that worker runs after them.
    """
    yield
    if not _STOP_RAY_CLUSTER or not last_ray_user(item, item.session.items):
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()  # this process's connection (ray_session) first; its own finalizer then finds nothing to do
    _STOP_RAY_CLUSTER.pop()()


# What an in-process fit leaves behind in os.environ: Lightning exports these for its process group, and
# OMP_NUM_THREADS (the cores per process) under ddp. A later `ray start` inherited that, its 1-CPU workers then
# ran 2 threads each, and their sums no longer matched the one-thread runs they are compared with.
RENDEZVOUS_VARS = (*RENDEZVOUS, "PL_GLOBAL_SEED", "PL_SEED_WORKERS", "OMP_NUM_THREADS")


@pytest.fixture(autouse=True)
def _isolate_process_groups():
    """Each test starts and ends without a stale process group or rendezvous variables.

    A fit in the test process (``devices=1`` under ddp/sharded) keeps its process group, whose store still holds
    MASTER_PORT, and leaves MASTER_PORT in os.environ. Every later subprocess would inherit that busy port and
    fail with "address already in use" (the classic pitfall, between tests), and later tests would find a group
    that is not theirs.
    """
    import torch.distributed as dist

    saved = {k: os.environ.get(k) for k in RENDEZVOUS_VARS}
    had_group = dist.is_available() and dist.is_initialized()
    yield
    if not had_group and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


#: Lightning's child-process observer, under both namespaces (``pytorch_lightning`` runs on ``lightning_fabric``'s).
_OBSERVER_MODULES = (
    "lightning.fabric.strategies.launchers.subprocess_script",
    "lightning_fabric.strategies.launchers.subprocess_script",
)


def _child_observers() -> set[threading.Thread]:
    """Lightning's child-process observer threads alive in this process that still watch a child.

    Every in-process ``ddp``/``sharded`` fit on one device starts one over an empty list: its next check finds nothing
    wrong and it ends in silence, so only an observer with children to look at can log or signal anything later.
    """
    classes = tuple(m._ChildProcessObserver for name in _OBSERVER_MODULES if (m := sys.modules.get(name)) is not None)
    if not classes:
        return set()
    return {
        t
        for t in threading.enumerate()
        if isinstance(t, classes) and t.is_alive() and getattr(t, "_child_processes", None)
    }


@pytest.fixture(autouse=True)
def _no_child_observer_outlives_its_test() -> Iterator[None]:
    """A test that starts Lightning's child-process observer in this process ends it before it returns.

    The observer is a daemon thread that wakes every 5 s. One left behind by a test woke later on: after the
    test's patches were undone (its next check could SIGKILL this pytest process, which it takes for the job's rank 0)
    or after pytest had closed its captured stream, where Lightning's logger printed "--- Logging error --- ...
    I/O operation on closed file" at the end of the run.
    """
    before = _child_observers()
    yield
    left = _child_observers() - before
    if not left:
        return
    for thread in left:
        # Defuse it before failing: with no children to look at, its next check finds nothing wrong and it ends
        # without logging or signalling anything (the list is rebound, not emptied: it may be a launcher's own).
        thread._child_processes = []
    pytest.fail(
        f"{len(left)} Lightning child-process observer thread(s) outlived the test: stop or join them in the test "
        "(see tests/unit/utilities/test_child_observer.py)",
        pytrace=False,
    )
