"""Under ``sharded`` (FairScale), a validation pass between training steps must not change the steps that follow.

Lightning's validation loop leaves the ShardedDataParallel wrapper in eval mode, where it reduces no gradient: the
ranks then stepped on local gradients (max |diff| against ``ddp`` about 0.03 after 14 SGD steps on 2 ranks).
Found on 2026-11-25 while testing exact resume (issue 13); fixed by ``fairscale.follow_module_mode``.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.launch import run_python
from tests.helpers.runif import RunIf

#: (strategy, limit_val_batches): every run of the module, in one launch (a launch is mostly imports).
RUNS = [("ddp", 0), ("sharded", 0), ("ddp", 3), ("sharded", 3)]


@pytest.fixture(scope="module")
def finals(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], dict[str, torch.Tensor]]:
    root = tmp_path_factory.mktemp("val_parity")
    outs = {run: root / f"{run[0]}_{run[1]}.pt" for run in RUNS}
    argv = [arg for (strategy, limit), out in outs.items() for arg in (strategy, str(out), str(limit))]
    run_python(["-m", "tests.integration.runners.run_val_parity", *argv], timeout=300)
    return {run: torch.load(out) for run, out in outs.items()}


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@RunIf(fairscale=True)
@pytest.mark.timeout(400)
def test_without_validation_sharded_equals_ddp(finals) -> None:
    assert _equal(finals["ddp", 0], finals["sharded", 0])


@RunIf(fairscale=True)
@pytest.mark.timeout(400)
def test_with_validation_sharded_equals_ddp(finals) -> None:
    assert _equal(finals["ddp", 3], finals["sharded", 3])
