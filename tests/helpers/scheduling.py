"""How the suite is ordered, and how ``pytest -n 2`` (pytest-xdist) shares it between two workers.

The suite is mostly launches of 2-rank jobs, and a job spends much of its time in one process (imports, a rank
waiting for the other, a launcher waiting for its workers): run alone, the jobs leave the 2 cores idle over a third of
the time (measured with vmstat over a serial run). A second worker fills that. What must not be split:

- a file's tests, which share module fixtures (one reference run, one set of parity launches);
- the tests of the session's Ray cluster: each worker that needed it would start a cluster of its own;
- the callback files that read ``run_callbacks.launch``'s runs (kept per process): a second worker would launch the
  same runs again (about 30 CPU-s, when the files happened to be split);
- the contract tier's modules, which judge the same launches (``contract_runs``, one per process).

So the work units are files, plus one unit for each of those groups (``SHARED_UNITS``). Units are handed out longest
first, so that no long unit starts last and runs alone at the end: the Ray unit, then units by their number of
multi-process (``integration``) tests.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

#: Fixtures whose tests start or join the session's Ray cluster (tests/conftest.py).
RAY_FIXTURES = ("ray_cluster", "ray_session")
RAY_UNIT = "ray-cluster"
CALLBACKS_UNIT = "callbacks-matrix"
CONTRACT_UNIT = "contract"
#: The units of several files, and what names a file as one of them (the xdist controller sees node ids, not fixtures).
SHARED_UNITS = {
    RAY_UNIT: re.compile(r"\b(?:" + "|".join(RAY_FIXTURES) + r")\b"),
    CALLBACKS_UNIT: re.compile(r"\brun_callbacks import launch\b"),
    CONTRACT_UNIT: re.compile(r"\bcontract_runs\b"),
}


def uses_ray_cluster(item: pytest.Item) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in RAY_FIXTURES)


def last_ray_user(item: pytest.Item, items: list[pytest.Item]) -> bool:
    """Whether ``item`` is the last test of ``items`` (this process's collection, in run order) that uses the Ray
    cluster.

    A Ray file also holds tests without Ray, so the next test alone cannot tell. Under xdist every Ray test is in one
    unit that one worker runs, and each worker's ``items`` is the whole suite in the order the units are handed out,
    so the last Ray test of ``items`` is the last one the cluster's worker runs.
    """
    return uses_ray_cluster(item) and next((it for it in reversed(items) if uses_ray_cluster(it)), None) is item


def order_serially(items: list[pytest.Item]) -> None:
    """One process: the Ray tests last. The cluster starts with the first of them, and its idle daemons (4 % of this
    2-core machine) then no longer run beside every other test."""
    items.sort(key=uses_ray_cluster)


def order_for_workers(items: list[pytest.Item]) -> None:
    """Under xdist: the Ray unit first, then units with more multi-process tests before units with fewer.

    Every worker collects this order, and the scheduler hands out its units in it (``make_scheduler``).
    """
    units = {id(item): unit_of(item.nodeid, item.config.rootpath) for item in items}
    launches = Counter(units[id(item)] for item in items if item.get_closest_marker("integration"))
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda it: (units[id(it)] != RAY_UNIT, -launches[units[id(it)]], position[id(it)]))


def _path(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str, root: Path) -> str:
    """The work unit of a test: the shared unit its file belongs to (``SHARED_UNITS``), or its file.

    A test file that uses the cluster names its fixture (a test's argument). A file that reached it only through
    another fixture would get a unit, and a cluster, of its own: slower, not wrong.
    """
    return _unit_of_file(root, _path(nodeid))


@cache
def _unit_of_file(root: Path, path: str) -> str:  # once per file: every test of the suite asks
    try:
        text = (root / path).read_text()
    except OSError:
        text = ""
    return next((unit for unit, names_it in SHARED_UNITS.items() if names_it.search(text)), path)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The xdist scheduler: ``--dist loadfile`` with the Ray files in one unit, units in collection order."""
    from xdist.scheduler import LoadFileScheduling

    class FileAndRayScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid, config.rootpath)

    config.option.loadscopereorder = False  # keep the order of order_for_workers
    return FileAndRayScheduling(config, log)
