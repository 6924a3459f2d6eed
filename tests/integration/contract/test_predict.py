"""The contract tier, predict: ``predict`` with two dataloaders and ``return_predictions``: the launching process gets
every loader's batches.

Every strategy runs the same small fits (``tests/integration/runners/run_contract.py``); ``tests/helpers/contract.py``
judges what each rank saw.
"""

from __future__ import annotations

import pytest

from tests.helpers.contract import Runs, features_of, strategy_params


@pytest.mark.timeout(900)
@pytest.mark.parametrize("feature", features_of("predict"))
@pytest.mark.parametrize("strategy", strategy_params())
def test_predict_behave_as_lightning_tests_them(contract_runs: Runs, strategy: str, feature: str) -> None:
    contract_runs.check(strategy, feature)
