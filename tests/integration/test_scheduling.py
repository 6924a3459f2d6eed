"""How ``pytest -n 2`` shares the suite (``tests/helpers/scheduling.py``): whole files, the Ray files (and the callback
matrix's files) on one worker.

The tests that launch processes; the in-process ones are in ``tests/unit/test_scheduling.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers.launch import REPO_ROOT, run

pytest.importorskip("xdist")


_CONFTEST = f"""
import os, sys
sys.path.insert(0, {str(REPO_ROOT)!r})
import pytest
from tests.helpers.scheduling import make_scheduler, order_for_workers

def pytest_configure(config):
    config.addinivalue_line("markers", "integration: multi-process")

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
    # Files that read the callback matrix's per-process runs (named by their import, as in tests/integration/callbacks).
    # Their multi-process tests put them right after the Ray unit; as five units of their own, both workers would get
    # some (the chance that one worker took all five is small), so the check below fails if they were not one unit.
    launched = "import pytest\n" + "\n".join(f"@pytest.mark.integration\ndef test_{i}():\n    pass\n" for i in range(3))
    for name in "abcde":
        (tmp_path / f"test_matrix_{name}.py").write_text(
            f"# from tests.integration.runners.run_callbacks import launch\n{launched}"
        )
    proc = run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q", str(tmp_path)],
        cwd=tmp_path,
        environ={**os.environ, "RECORD": str(record)},
        timeout=120,
    )
    assert "30 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [line.split(" ", 1) for line in record.read_text().splitlines()]
    workers_of: dict[str, set[str]] = {}
    for worker, nodeid in runs:
        workers_of.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert all(len(w) == 1 for w in workers_of.values()), workers_of  # no file split between workers
    assert workers_of["test_ray_a.py"] == workers_of["test_ray_b.py"], workers_of  # one Ray unit
    assert len({frozenset(workers_of[f"test_matrix_{name}.py"]) for name in "abcde"}) == 1, (
        workers_of
    )  # one matrix unit
    assert len(set().union(*workers_of.values())) == 2  # both workers worked
    ray_worker = next(iter(workers_of["test_ray_a.py"]))
    first = [nodeid for worker, nodeid in runs if worker == ray_worker][:3]
    assert all(nodeid.startswith("test_ray_") for nodeid in first), first  # the Ray unit went first
