"""How ``pytest -n 2`` shares the suite (``tests/helpers/scheduling.py``): whole files, the Ray files on one worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers.launch import REPO_ROOT
from tests.helpers.scheduling import RAY_UNIT, last_ray_user, unit_of

pytest.importorskip("xdist")


def test_the_ray_cluster_stops_after_the_last_test_that_uses_it() -> None:
    ray, ray_data, other, other2 = (SimpleNamespace(fixturenames=names) for names in
                                    (["ray_cluster"], ["ray_session", "ray_cluster"], ["tmp_path"], ["tmp_path"]))  # fmt: skip
    # A Ray file holds tests without Ray: a Ray test followed by one of those is not the last Ray test.
    items = [ray, other, ray_data, other2]
    assert [last_ray_user(it, items) for it in items] == [False, False, True, False]
    assert last_ray_user(ray, [other, ray]) and not last_ray_user(other, [other])


def test_the_suites_ray_files_share_one_unit_and_other_files_are_their_own() -> None:
    assert unit_of("tests/launchers/test_ray_train_integration.py::test_x[a]", REPO_ROOT) == RAY_UNIT
    assert unit_of("tests/data/test_preprocess.py::test_y", REPO_ROOT) == RAY_UNIT
    assert unit_of("tests/test_cli.py::test_z", REPO_ROOT) == "tests/test_cli.py"


_CONFTEST = f"""
import os, sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import pytest
from tests.helpers.scheduling import make_scheduler, order_for_workers

def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):
        order_for_workers(items)

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return make_scheduler(config, log)

@pytest.fixture(scope="session")
def ray_cluster():
    return "the cluster"

@pytest.fixture(autouse=True)
def _record(request):
    with open(os.environ["RECORD"], "a") as f:
        f.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{request.node.nodeid}}\\n")
"""


def test_two_workers_keep_files_whole_and_run_the_ray_files_together_first(tmp_path: Path) -> None:
    record = tmp_path / "record.txt"
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    plain = "\n".join(f"def test_{i}():\n    pass\n" for i in range(3))
    for name in "abcd":
        (tmp_path / f"test_plain_{name}.py").write_text(plain)
    (tmp_path / "test_ray_a.py").write_text("def test_one(ray_cluster):\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "test_ray_b.py").write_text("def test_three(ray_cluster):\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q", str(tmp_path)], cwd=tmp_path,
                          env={**os.environ, "RECORD": str(record)}, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and "15 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [line.split(" ", 1) for line in record.read_text().splitlines()]
    workers_of: dict[str, set[str]] = {}
    for worker, nodeid in runs:
        workers_of.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert all(len(w) == 1 for w in workers_of.values()), workers_of  # no file split between workers
    assert workers_of["test_ray_a.py"] == workers_of["test_ray_b.py"], workers_of  # one Ray unit
    assert len(set().union(*workers_of.values())) == 2  # both workers worked
    ray_worker = next(iter(workers_of["test_ray_a.py"]))
    first = [nodeid for worker, nodeid in runs if worker == ray_worker][:3]
    assert all(nodeid.startswith("test_ray_") for nodeid in first), first  # the Ray unit went first
