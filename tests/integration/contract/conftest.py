"""The contract tier's runs, launched once per test process and shared by its modules (one xdist unit:
tests/helpers/scheduling.py)."""

from __future__ import annotations

import pytest

from tests.helpers.contract import Runs


@pytest.fixture(scope="session")
def contract_runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("contract"))
