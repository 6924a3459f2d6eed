"""NeptuneLogger on the real neptune 1.x client: debug mode (read back with fetch), offline mode
(parse the operation log on disk), refused / silent servers on 127.0.0.1, rank-zero behaviour,
pickling, and 2-process ddp / ddp_spawn runs. Nothing here touches the network beyond loopback.

The tests that launch processes; the in-process ones are in ``tests/unit/loggers/test_neptune.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.launch import run_python
from tests.helpers.runif import require_or_skip
from tests.unit.loggers.test_neptune import _assigned, _operations, _series, neptune_dir  # noqa: F401

require_or_skip("neptune")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("ddp_spawn", marks=pytest.mark.extended)])
def test_two_process_training_writes_one_run_from_rank_zero(strategy: str, tmp_path: Path, neptune_dir: Path) -> None:
    out = tmp_path / "out"
    run_python(
        ["-m", "tests.integration.runners.run_neptune_ddp", "--strategy", strategy, "--out", str(out)],
        timeout=540,
        env={"NEPTUNE_DATA_DIRECTORY": str(neptune_dir)},
    )

    pids = {r: json.loads((out / f"pid_rank{r}.json").read_text())["pid"] for r in (0, 1)}
    runs = list((neptune_dir / "offline").iterdir())
    assert len(runs) == 1, f"expected one run (rank 0's), found {[p.name for p in runs]}"
    assert f"__{pids[0]}__" in runs[0].name  # written by the rank-0 process, not the launcher or rank 1

    ops = _operations(runs[0])
    series = _series(ops)
    steps = [s for s, _ in series["training/train_loss"]]
    assert steps == list(range(6))
    # Each rank's own value reached rank 0's run, in the per-rank monitoring layout.
    assert [v for _, v in series["monitoring/rank0/time/data_wait_pct"]] == [10.0] * 6
    assert [v for _, v in series["monitoring/rank1/time/data_wait_pct"]] == [11.0] * 6
    assert len(series["training/val_loss"]) == 1
    assigned = _assigned(ops)
    assert assigned["sys/name"] == f"tiny-{strategy}"
    assert assigned["training/hyperparams/hidden"] == 8
    assert assigned["training/model/last_model_path"] == str(out / "ckpt" / "last.ckpt")
    assert Path(assigned["training/model/best_model_path"]).is_file()
    assert assigned["training/status"] == "success"
    assert any(op["type"] == "UploadFile" and op["path"] == ["training", "model", "summary"] for op in ops)
