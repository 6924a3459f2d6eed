"""How ``pytest -n 2`` shares the suite (``tests/helpers/scheduling.py``): whole files, the Ray files (and the callback
matrix's files) on one worker.

The in-process tests; the ones that launch processes are in ``tests/integration/test_scheduling.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers.launch import REPO_ROOT
from tests.helpers.scheduling import CALLBACKS_UNIT, RAY_UNIT, last_ray_user, unit_of

pytest.importorskip("xdist")


def test_the_ray_cluster_stops_after_the_last_test_that_uses_it() -> None:
    ray, ray_data, other, other2 = (
        SimpleNamespace(fixturenames=names)
        for names in (["ray_cluster"], ["ray_session", "ray_cluster"], ["tmp_path"], ["tmp_path"])
    )
    # A Ray file holds tests without Ray: a Ray test followed by one of those is not the last Ray test.
    items = [ray, other, ray_data, other2]
    assert [last_ray_user(it, items) for it in items] == [False, False, True, False]
    assert last_ray_user(ray, [other, ray]) and not last_ray_user(other, [other])


def test_the_suites_ray_files_share_one_unit_and_other_files_are_their_own() -> None:
    assert unit_of("tests/integration/launchers/test_ray_train.py::test_x[a]", REPO_ROOT) == RAY_UNIT
    assert unit_of("tests/integration/data/test_preprocess.py::test_y", REPO_ROOT) == RAY_UNIT
    assert unit_of("tests/unit/test_cli.py::test_z", REPO_ROOT) == "tests/unit/test_cli.py"


def test_the_files_that_read_the_callback_matrix_share_one_unit() -> None:
    """run_callbacks.launch keeps its runs per process: split over two workers, each would launch them."""
    files = ("test_grad_sync", "test_activation_checkpointing", "test_mixed_precision", "test_zero_grad")
    assert {unit_of(f"tests/integration/callbacks/{name}.py::test_x", REPO_ROOT) for name in files} == {CALLBACKS_UNIT}
    assert unit_of("tests/integration/callbacks/test_clean_exit.py::test_y", REPO_ROOT).endswith("test_clean_exit.py")
