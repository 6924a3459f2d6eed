"""Under ``sharded`` (FairScale), a validation pass between training steps must not change the steps that follow.

Lightning's validation loop leaves the ShardedDataParallel wrapper in eval mode, where it reduces no gradient: the
ranks then stepped on local gradients (max |diff| against ``ddp`` about 0.03 after 14 SGD steps on 2 ranks).
Found on 2026-11-25 while testing exact resume (issue 13); fixed by ``fairscale.follow_module_mode``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.launch import run_python
from tests.helpers.runif import RunIf


def _final(tmp_path: Path, strategy: str, limit_val_batches: int) -> dict[str, torch.Tensor]:
    out = tmp_path / f"{strategy}_{limit_val_batches}.pt"
    run_python(["-m", "tests.integration.runners.run_val_parity", strategy, str(out), str(limit_val_batches)], timeout=180)
    return torch.load(out)


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@RunIf(fairscale=True)
@pytest.mark.timeout(400)
def test_without_validation_sharded_equals_ddp(tmp_path: Path) -> None:
    assert _equal(_final(tmp_path, "ddp", 0), _final(tmp_path, "sharded", 0))


@RunIf(fairscale=True)
@pytest.mark.timeout(400)
def test_with_validation_sharded_equals_ddp(tmp_path: Path) -> None:
    assert _equal(_final(tmp_path, "ddp", 3), _final(tmp_path, "sharded", 3))
