"""The contract tier, hooks: The full hook sequence of fit, validate, test, predict and a resume with ``max_steps``, on
every rank, as under Lightning's ddp (what ``tests/tests_pytorch/models/test_hooks.py`` checks).

Every strategy runs the same small fits (``tests/integration/runners/run_contract.py``); ``tests/helpers/contract.py``
judges what each rank saw.
"""

from __future__ import annotations

import pytest

from tests.helpers.contract import Runs, features_of, strategy_params


@pytest.mark.timeout(900)
@pytest.mark.parametrize("feature", features_of("hooks"))
@pytest.mark.parametrize("strategy", strategy_params())
def test_hooks_behave_as_lightning_tests_them(contract_runs: Runs, strategy: str, feature: str) -> None:
    contract_runs.check(strategy, feature)
