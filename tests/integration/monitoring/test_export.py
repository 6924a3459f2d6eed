"""``examples/train.py --gpu-monitor --logger mlflow|tensorboard|csv`` under ddp on 2 CPU processes: every rank's
time line reaches the logger's store under its names, read back with the logger's own reader.

Rank 0 says where the logger's run is and each rank writes its own points (no GPU here: the CPU and timing series;
the GPU names are checked in-process with a fake NVML, ``tests/unit/monitoring/test_export.py``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lightning_mgpu.monitoring.export import PHASE_CODES, csv_timeline_path, tensorboard_run_dir
from tests.helpers.launch import TRAIN, run_python
from tests.helpers.runif import require_or_skip

RANKS = (0, 1)


def _train(out: Path, logger: str) -> None:
    run_python(
        [TRAIN, "--strategy", "ddp", "--devices", "2", "--accelerator", "cpu", "--max-steps", "12"]
        + ["--gpu-monitor", "--monitor-interval", "0.02", "--logger", logger, "--output-dir", str(out)],
        env={"MLFLOW_DISABLE_TELEMETRY": "true"},  # no network from tests
        timeout=300,
    )


@pytest.mark.parametrize("logger", ["mlflow", "tensorboard", pytest.param("csv", marks=pytest.mark.extended)])
def test_train_py_writes_every_ranks_time_line_into_its_logger(
    tmp_path: Path, logger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / logger
    _train(out, logger)
    if logger == "mlflow":
        require_or_skip("mlflow")
        from mlflow.tracking import MlflowClient

        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what train.py sets for its local store
        monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        client = MlflowClient(tracking_uri=f"file:{out / 'mlruns'}")
        (run,) = client.search_runs([client.get_experiment_by_name("lightning_mgpu").experiment_id])
        for rank in RANKS:
            util = client.get_metric_history(run.info.run_id, f"timeline/cpu/rank{rank}/util_pct")
            assert len(util) >= 3 and all(0 <= m.value for m in util)
            codes = {m.value for m in client.get_metric_history(run.info.run_id, f"timeline/phase/rank{rank}")}
            assert {PHASE_CODES["train"], PHASE_CODES["validation"]} <= codes
            assert client.get_metric_history(run.info.run_id, f"timeline/time/rank{rank}/data_wait_pct")
            assert run.data.tags[f"gpu_monitor.verdict.rank{rank}"]
            assert run.data.tags[f"gpu_monitor.devices.rank{rank}"] == f"rank{rank}: cpu"
        # The monitor's own files: beside the run, not among MLflow's experiments (train.py's default_root_dir).
        assert (out / "gpu_monitor" / run.info.run_id / "diagnosis.json").is_file()
        assert not (out / "mlruns" / "timeline").exists()
    elif logger == "tensorboard":
        require_or_skip("tensorboard")
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        for rank in RANKS:
            events = EventAccumulator(str(tensorboard_run_dir(str(out / "tb" / "version_0"), rank)))
            events.Reload()
            assert len(events.Scalars(f"cpu/rank{rank}/util_pct")) >= 3
            assert events.Scalars(f"time/rank{rank}/data_wait_pct")
            phases = [e.tensor_proto.string_val[0].decode() for e in events.Tensors("phase/text_summary")]
            assert {"train", "validation"} <= set(phases)
    else:
        for rank in RANKS:
            path = csv_timeline_path(str(out / "logs" / "version_0"), rank)
            with path.open(newline="") as f:
                rows = list(csv.DictReader(f))
            assert len([r for r in rows if r[f"cpu/rank{rank}/util_pct"]]) >= 3
            assert {"train", "validation"} <= {r["phase"] for r in rows if r["phase_change"] == "1"}
