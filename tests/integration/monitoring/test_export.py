"""``examples/train.py --gpu-monitor --logger mlflow|tensorboard|csv|wandb`` under ddp on 2 CPU processes: every
rank's time line reaches the logger's store under its names, read back with the logger's own reader (and MLflow's
through ``mlflow server``'s REST API).

Rank 0 says where the logger's run is and each rank writes its own points. There is no GPU here: the MLflow and W&B
runs are written on fake GPUs (``tests/helpers/fake_gpu_train.py``: NVML's GPU 3 for rank 0, 1 for rank 1), for their
GPU names; TensorBoard and CSV get the CPU and timing series (their GPU keys are checked in-process with a fake NVML,
``tests/unit/monitoring/test_export.py``). The W&B runs are read back from their offline folder.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lightning_mgpu.monitoring.export import PHASE_CODES, csv_timeline_path, tensorboard_run_dir
from lightning_mgpu.monitoring.timeline import read_timeline, timeline_path
from tests.helpers.launch import TRAIN, finish, processes_naming, run_python, start
from tests.helpers.runif import require_or_skip

RANKS = (0, 1)
FAKE_GPU_TRAIN = str(Path(__file__).resolve().parents[2] / "helpers" / "fake_gpu_train.py")
#: The fake GPUs' NVML index per rank (tests/helpers/fake_gpu_train.py: CUDA_VISIBLE_DEVICES=3,1, cuda:<local rank>).
NVML_INDEX = {0: 3, 1: 1}


def _train(out: Path, logger: str, runner: str = TRAIN) -> None:
    run_python(
        [runner, "--strategy", "ddp", "--devices", "2", "--accelerator", "cpu", "--max-steps", "12"]
        + ["--gpu-monitor", "--monitor-interval", "0.02", "--logger", logger, "--output-dir", str(out)],
        env={"MLFLOW_DISABLE_TELEMETRY": "true"},  # no network from tests
        timeout=300,
    )


@pytest.mark.parametrize("logger", ["mlflow", "tensorboard", pytest.param("csv", marks=pytest.mark.extended)])
def test_train_py_writes_every_ranks_time_line_into_its_logger(
    tmp_path: Path, logger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / logger
    # The store is train.py's own (OUTPUT_DIR/mlruns): not one an earlier test's mlflow.set_tracking_uri left here.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # MLflow's run on fake GPUs (tests/helpers/fake_gpu_train.py), for its system-metric names.
    _train(out, logger, FAKE_GPU_TRAIN if logger == "mlflow" else TRAIN)
    if logger == "mlflow":
        require_or_skip("mlflow")
        from mlflow.tracking import MlflowClient

        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what train.py sets for its local store
        monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        client = MlflowClient(tracking_uri=f"file:{out / 'mlruns'}")
        (run,) = client.search_runs([client.get_experiment_by_name("lightning_mgpu").experiment_id])
        histories = {}
        for rank in RANKS:
            # MLflow's system-metric name, with the rank where MLflow puts a node id, and NVML's index.
            key = f"system/rank{rank}/gpu_{NVML_INDEX[rank]}_utilization_percentage"
            histories[key] = client.get_metric_history(run.info.run_id, key)
            assert len(histories[key]) >= 3 and {m.value for m in histories[key]} == {40.0 if rank == 0 else 20.0}
            util = client.get_metric_history(run.info.run_id, f"timeline/cpu/rank{rank}/util_pct")
            assert len(util) >= 3 and all(0 <= m.value for m in util)
            codes = {m.value for m in client.get_metric_history(run.info.run_id, f"timeline/phase/rank{rank}")}
            assert {PHASE_CODES["train"], PHASE_CODES["validation"]} <= codes
            assert client.get_metric_history(run.info.run_id, f"timeline/time/rank{rank}/data_wait_pct")
            assert run.data.tags[f"gpu_monitor.verdict.rank{rank}"]
            device = f"rank{rank}: cuda:{rank} = NVML GPU {NVML_INDEX[rank]}"
            assert run.data.tags[f"gpu_monitor.devices.rank{rank}"].startswith(device)
        # The monitor's own files: beside the run, not among MLflow's experiments (train.py's default_root_dir).
        assert (out / "gpu_monitor" / run.info.run_id / "diagnosis.json").is_file()
        assert not (out / "mlruns" / "timeline").exists()
        _check_mlflow_rest_api(tmp_path, f"file:{out / 'mlruns'}", run.info.run_id, histories)
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


# --------------------------------------------------------------------------- W&B, offline, on fake GPUs


def _read_wandb_run(run_dir: Path) -> dict[str, Any]:
    """An offline run's transaction log (``run-<id>.wandb``) read with W&B's own reader: its run record, history
    rows, metric definitions, summary and config."""
    datastore = require_or_skip("wandb.sdk.internal.datastore")  # W&B's Python reader: 0.29 and older
    from wandb.proto import wandb_internal_pb2

    def key(item: Any) -> str:
        return item.key or "/".join(item.nested_key)

    (path,) = run_dir.glob("run-*.wandb")
    store = datastore.DataStore()  # type: ignore[attr-defined]
    store.open_for_scan(str(path))
    out: dict[str, Any] = {"history": [], "metrics": {}, "summary": {}, "config": {}}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":  # wandb.init's config is in it
            out["run"] = record.run
            out["config"].update({key(i): json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "history":
            out["history"].append({key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "metric" and record.metric.name:
            out["metrics"][record.metric.name] = record.metric.step_metric
        elif kind == "summary":
            out["summary"].update({key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "config":
            out["config"].update({key(i): json.loads(i.value_json) for i in record.config.update})
    return out


def test_train_py_writes_every_ranks_time_line_into_wandb_offline_under_its_gpu_names(tmp_path: Path) -> None:
    """``train.py --gpu-monitor --logger wandb`` under ddp (2 CPU processes, fake GPUs): rank 0's samples in the
    logger's run, rank 1's in a run of its own in the same group, under ``gpu.{NVML index}.*``."""
    require_or_skip("wandb")
    out = tmp_path / "wandb"
    home = tmp_path / "wandb_home"  # W&B's settings, cache and artifacts: nothing in the user's home
    run_python(
        [FAKE_GPU_TRAIN, "--strategy", "ddp", "--devices", "2", "--accelerator", "cpu", "--max-steps", "12"]
        + ["--gpu-monitor", "--monitor-interval", "0.02", "--logger", "wandb", "--output-dir", str(out)],
        env={
            "WANDB_MODE": "offline",  # no network, no login
            "WANDB_SILENT": "true",
            "WANDB_DIR": str(out),
            "WANDB_CONFIG_DIR": str(home / "config"),
            "WANDB_CACHE_DIR": str(home / "cache"),
            "WANDB_DATA_DIR": str(home / "data"),
            "WANDB_ERROR_REPORTING": "false",
            "WANDB_RUN_GROUP": "wt-group",
        },
        timeout=300,
    )
    runs = [_read_wandb_run(d) for d in sorted((out / "wandb").glob("offline-run-*"))]
    assert len(runs) == 2  # one per process, as W&B does it
    (rank0,) = [r for r in runs if not r["run"].display_name.endswith("-rank1")]
    (rank1,) = [r for r in runs if r["run"].display_name.endswith("-rank1")]
    assert rank0["run"].run_group == rank1["run"].run_group == "wt-group"
    assert rank1["run"].display_name == f"{rank0['run'].run_id}-rank1"
    assert rank1["config"]["gpu_monitor/rank0_run"] == rank0["run"].run_id
    for rank, run in ((0, rank0), (1, rank1)):
        gpu = f"gpu.{NVML_INDEX[rank]}"
        samples = [p for p in read_timeline(timeline_path(out, rank)) if f"gpu/rank{rank}/util_pct" in p["values"]]
        rows = [h for h in run["history"] if f"{gpu}.gpu" in h]
        assert len(rows) == len(samples) >= 3  # every sample of the time line, at the monitor's resolution
        assert [h["timeline/wall_time"] for h in rows] == pytest.approx([p["t"] for p in samples])
        assert all(h["_timestamp"] == h["timeline/wall_time"] for h in rows)  # W&B's wall time is the sample's
        assert {h[f"{gpu}.gpu"] for h in rows} == {40.0 if rank == 0 else 20.0}  # the fake GPU's utilisation
        assert {h[f"{gpu}.powerWatts"] for h in rows} == {250.0} and {h[f"{gpu}.powerPercent"] for h in rows} == {50.0}
        assert {h[f"{gpu}.memoryAllocatedBytes"] for h in rows} == {3 * 2**30}
        assert {h[f"{gpu}.temp"] for h in rows} == {55} and {h[f"{gpu}.smClock"] for h in rows} == {1410}
        other = f"gpu.{NVML_INDEX[1 - rank]}"
        assert not any(k.startswith(f"{other}.") for h in run["history"] for k in h)  # only this process's GPU
        assert any(f"timeline/time/rank{rank}/data_wait_pct" in h for h in run["history"])
        assert {"train", "validation"} <= {
            h["timeline/phase_change"] for h in run["history"] if "timeline/phase_change" in h
        }
        # Their own x axis, not Lightning's trainer/global_step; _step only grows.
        assert run["metrics"][f"{gpu}.gpu"] == run["metrics"]["timeline/phase"] == "timeline/wall_time"
        steps = [h["_step"] for h in run["history"]]
        assert steps == sorted(set(steps))
        assert run["config"][f"gpu_monitor/devices/rank{rank}"].startswith(f"rank{rank}: cuda:{rank} = NVML GPU")
    assert rank0["metrics"]["trainer/global_step"] == ""  # Lightning's own rows keep their axis
    verdict = rank0["summary"]["gpu_monitor/verdict/rank0"]
    assert rank0["summary"]["gpu_monitor/verdict"].startswith(f"rank0: {verdict}, rank1: ")
    assert f"gpu_monitor: {verdict}" in rank0["run"].tags  # the run's last record, after the end-of-fit diagnosis
    (files,) = [d / "files" for d in (out / "wandb").glob("offline-run-*") if rank0["run"].run_id in d.name]
    assert (files / "diagnosis.json").is_file()


# --------------------------------------------------------------------------- MLflow's REST API, from `mlflow server`
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _check_mlflow_rest_api(tmp_path: Path, store: str, run_id: str, histories: dict[str, list[Any]]) -> None:
    """``mlflow server`` on the store: its REST API's metric history of each key is the client's, sample for sample
    (the server needs the mlflow-server extra beside mlflow-skinny)."""
    require_or_skip("flask")
    port = _free_port()
    log_path = tmp_path / "mlflow_server.log"
    with log_path.open("w") as log:
        server = start(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store, "--host", "127.0.0.1"]
            + ["--port", str(port), "--workers", "1"],
            env={"MLFLOW_ALLOW_FILE_STORE": "true", "MLFLOW_DISABLE_TELEMETRY": "true"},  # no network from tests
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its uvicorn child in its group, stopped with it
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:  # a bounded wait for its first answer
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"mlflow server did not answer:\n{log_path.read_text()}") from None
                time.sleep(0.5)
        for key, history in histories.items():
            query = urllib.parse.urlencode({"run_id": run_id, "metric_key": key})
            metrics = _get(f"{base}/api/2.0/mlflow/metrics/get-history?{query}")["metrics"]
            assert sorted((m["timestamp"], m["step"], m["value"]) for m in metrics) == sorted(
                (m.timestamp, m.step, m.value) for m in history
            )
        tags = {
            t["key"]: t["value"] for t in _get(f"{base}/api/2.0/mlflow/runs/get?run_id={run_id}")["run"]["data"]["tags"]
        }
        assert tags["gpu_monitor.devices.rank0"].startswith("rank0: cuda:0 = NVML GPU 3")
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its uvicorn worker stop cleanly on it, exit 0
        finish(server, timeout=30, what="mlflow server after SIGTERM")  # past 30 s: its group is killed, a failure
    assert not processes_naming(store)  # nothing of the server is left
