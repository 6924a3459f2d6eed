"""The contract tier, optimization: Gradient clipping by norm over the whole sharded gradient and by value, accumulation
with ``max_steps``, manual optimization with two optimizers, ``64-true`` and ``bf16-mixed``
(``tests/tests_pytorch/trainer/optimization/``, ``plugins/precision/``).

Every strategy runs the same small fits (``tests/integration/runners/run_contract.py``); ``tests/helpers/contract.py``
judges what each rank saw.
"""

from __future__ import annotations

import pytest

from tests.helpers.contract import Runs, features_of, strategy_params


@pytest.mark.timeout(900)
@pytest.mark.parametrize("feature", features_of("optimization"))
@pytest.mark.parametrize("strategy", strategy_params())
def test_optimization_behave_as_lightning_tests_them(contract_runs: Runs, strategy: str, feature: str) -> None:
    contract_runs.check(strategy, feature)
