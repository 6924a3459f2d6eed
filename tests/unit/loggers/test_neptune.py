"""NeptuneLogger on the real neptune 1.x client: debug mode (read back with fetch), offline mode
(parse the operation log on disk), refused / silent servers on 127.0.0.1, rank-zero behaviour,
pickling, and 2-process ddp / ddp_spawn runs. Nothing here touches the network beyond loopback.

The in-process tests; the ones that launch processes are in ``tests/integration/loggers/test_neptune.py``.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.loggers import NeptuneLogger, NeptuneServerUnreachableError
from lightning_mgpu.loggers.neptune_layout import from_neptune_path, to_neptune_path
from tests.helpers.runif import require_or_skip
from tests.helpers.trainer import quiet_trainer

require_or_skip("neptune")


@pytest.fixture(autouse=True)
def neptune_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every Neptune file of a test lands in its tmp_path; no token or project leaks in from the environment."""
    data_dir = tmp_path / "neptune-data"
    monkeypatch.setenv("NEPTUNE_DATA_DIRECTORY", str(data_dir))
    for var in ("NEPTUNE_API_TOKEN", "NEPTUNE_PROJECT", "NEPTUNE_MODE"):
        monkeypatch.delenv(var, raising=False)
    return data_dir


@pytest.fixture
def loggers() -> Iterator[list[NeptuneLogger]]:
    """Collects loggers and stops their runs, so no Neptune thread outlives its test."""
    made: list[NeptuneLogger] = []
    yield made
    for logger in made:
        logger.stop()


def _operations(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)["obj"]
        for log in sorted(run_dir.glob("data-*.log"))
        for line in log.read_text().splitlines()
        if line.strip()
    ]


def _series(ops: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for op in ops:
        if op["type"] == "LogFloats":
            out.setdefault("/".join(op["path"]), []).extend((v["step"], v["value"]) for v in op["values"])
    return out


def _assigned(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"/".join(op["path"]): op["value"] for op in ops if op["type"].startswith("Assign")}


def _token(url: str) -> str:
    return base64.b64encode(json.dumps({"api_address": url, "api_key": "not-a-real-key"}).encode()).decode()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("gpu/rank1/util_pct", "monitoring/rank1/gpu/util_pct"),
        ("time/rank0_dev1/data_wait_pct", "monitoring/rank0_dev1/time/data_wait_pct"),
        ("throughput/samples_per_sec", "monitoring/throughput/samples_per_sec"),
        ("throughput/mfu", "monitoring/throughput/mfu"),
        ("train_loss", "training/train_loss"),
        ("val/acc", "training/val/acc"),
        ("time/epoch_seconds", "training/time/epoch_seconds"),  # not a monitor key: stays a metric
    ],
)
def test_layout_round_trip(key: str, path: str) -> None:
    assert to_neptune_path(key) == path
    assert from_neptune_path(path) == key


def test_layout_ignores_foreign_paths() -> None:
    assert from_neptune_path("monitoring/9b8fc4b0/cpu") is None  # Neptune's own hardware monitoring
    assert from_neptune_path("sys/name") is None
    assert to_neptune_path("train_loss", prefix="") == "train_loss"


def test_debug_mode_metrics_hparams_and_monitor_namespace(loggers: list[NeptuneLogger]) -> None:
    logger = NeptuneLogger(mode="debug", name="unit")
    loggers.append(logger)
    logger.log_hyperparams({"lr": 0.1, "layers": [1, 2], "opt": None, "nested": {"width": 32}})
    for step, (loss, util) in enumerate([(0.9, 70.0), (0.5, 80.0), (0.25, 90.0)]):
        logger.log_metrics(
            {
                "train_loss": torch.tensor(loss),
                "gpu/rank1/util_pct": util,
                "gpu/rank0_dev1/util_pct": util / 2,
                "throughput/samples_per_sec": 100.0 * step,
            },
            step=step * 10,
        )
    run = logger.experiment
    run.wait()
    assert run["training/train_loss"].fetch_values()["value"].tolist() == pytest.approx(
        [0.9, 0.5, 0.25]
    )  # float32 tensors
    assert run["monitoring/rank1/gpu/util_pct"].fetch_values()["value"].tolist() == [70.0, 80.0, 90.0]
    assert run["monitoring/rank0_dev1/gpu/util_pct"].fetch_values()["value"].tolist() == [35.0, 40.0, 45.0]
    assert run["monitoring/throughput/samples_per_sec"].fetch_values()["value"].tolist() == [0.0, 100.0, 200.0]
    assert not run.exists("training/gpu")  # monitor keys never land under the metrics prefix
    hparams = run["training/hyperparams"].fetch()
    assert (
        hparams["lr"] == 0.1
        and hparams["layers"] == "[1, 2]"
        and hparams["opt"] == "None"
        and hparams["nested"] == {"width": 32}
    )
    assert run["sys/name"].fetch() == "unit"
    assert run["lightning_mgpu/metrics_prefix"].fetch() == "training"


def test_nonfinite_and_repeated_steps_are_skipped_with_one_warning(loggers: list[NeptuneLogger]) -> None:
    logger = NeptuneLogger(mode="debug")
    loggers.append(logger)
    with pytest.warns(UserWarning) as record:
        logger.log_metrics({"loss": 1.0, "epoch": 0}, step=5)
        logger.log_metrics({"loss": 2.0, "epoch": 0}, step=5)  # same step again: skipped (epoch silently)
        logger.log_metrics({"loss": 3.0}, step=4)  # backwards: skipped, no second warning
        logger.log_metrics({"loss": float("nan"), "acc": torch.tensor([1.0, 2.0])}, step=6)
        logger.log_metrics({"loss": 4.0}, step=7)
    messages = [str(w.message) for w in record]
    assert sum("increasing steps" in m for m in messages) == 1
    assert not any("epoch" in m for m in messages)
    assert sum("finite numbers only" in m for m in messages) == 1  # loss=nan; acc (a vector) warns under its own key
    assert sum("acc=" in m for m in messages) == 1
    logger.experiment.wait()
    assert logger.experiment["training/loss"].fetch_values()["value"].tolist() == [1.0, 4.0]
    assert logger.experiment["training/epoch"].fetch_values()["value"].tolist() == [0.0]
    assert not logger.experiment.exists("training/acc")


def test_offline_mode_writes_steps_to_disk_without_project(neptune_dir: Path, loggers: list[NeptuneLogger]) -> None:
    # The exact construction examples/train.py uses for --logger neptune, with NEPTUNE_PROJECT unset.
    logger = NeptuneLogger(mode=os.environ.get("NEPTUNE_MODE", "offline"), project=os.environ.get("NEPTUNE_PROJECT"))
    loggers.append(logger)
    logger.log_hyperparams({"batch_size": 32})
    logger.log_metrics({"train_loss": 0.5, "time/rank1/data_wait_pct": 42.0}, step=10)
    logger.log_metrics({"train_loss": 0.25, "time/rank1/data_wait_pct": 41.0}, step=20)
    logger.finalize("success")

    run_dirs = list((neptune_dir / "offline").iterdir())
    assert run_dirs == [logger.offline_dir]
    ops = _operations(logger.offline_dir)
    series = _series(ops)
    assert series["training/train_loss"] == [(10, 0.5), (20, 0.25)]  # steps kept as logged
    assert series["monitoring/rank1/time/data_wait_pct"] == [(10, 42.0), (20, 41.0)]
    assigned = _assigned(ops)
    assert assigned["training/hyperparams/batch_size"] == 32
    assert assigned["training/status"] == "success"
    assert logger.version == str(json.loads((logger.offline_dir / "metadata.json").read_text())["containerId"])


class _TinyModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


def test_trainer_records_summary_and_checkpoint_paths(tmp_path: Path, loggers: list[NeptuneLogger]) -> None:
    logger = NeptuneLogger(mode="offline", save_dir=tmp_path / "logs", name="tiny")
    loggers.append(logger)
    named = ModelCheckpoint(monitor="val_loss", save_last=True)  # no dirpath: Lightning asks the logger
    trainer = quiet_trainer(
        max_epochs=2,
        logger=logger,
        callbacks=[named],
        log_every_n_steps=1,
        enable_checkpointing=True,
        num_sanity_val_steps=0,
    )
    trainer.fit(_TinyModel())

    ckpt_dir = tmp_path / "logs" / "tiny" / str(logger.version) / "checkpoints"
    assert Path(named.dirpath) == ckpt_dir and (ckpt_dir / "last.ckpt").is_file()
    assert trainer.log_dir == str(tmp_path / "logs")
    ops = _operations(logger.offline_dir)
    assigned = _assigned(ops)
    assert assigned["training/model/last_model_path"] == str(ckpt_dir / "last.ckpt")
    assert assigned["training/model/best_model_path"] == named.best_model_path
    assert assigned["training/model/best_model_score"] == pytest.approx(float(named.best_model_score))
    assert json.loads(assigned["training/model/best_k_models"]) == {
        named.best_model_path: pytest.approx(float(named.best_model_score))
    }
    assert assigned["training/status"] == "success"
    summary_op = next(op for op in ops if op["type"] == "UploadFile" and op["path"] == ["training", "model", "summary"])
    summary = (logger.offline_dir / "upload_path" / summary_op["tmp_file_name"]).read_text()
    assert "layer" in summary and "Linear" in summary
    steps = [s for s, _ in _series(ops)["training/train_loss"]]
    assert len(steps) == 8 and steps == sorted(set(steps))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_refused_server_fails_fast_with_a_clear_error(mode: str, loggers: list[NeptuneLogger]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    logger = NeptuneLogger(mode=mode, project="team/proj", api_key=_token(url), connect_timeout=5)
    loggers.append(logger)
    with pytest.raises(NeptuneServerUnreachableError) as err:
        logger.log_metrics({"loss": 1.0}, step=0)
    message = str(err.value)
    assert url in message and "ConnectionRefusedError" in message and "mode='offline'" in message
    assert logger._run is None


@pytest.mark.timeout(120)
def test_silent_server_times_out_instead_of_hanging(loggers: list[NeptuneLogger]) -> None:
    with socket.socket() as server:  # accepts connections and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        logger = NeptuneLogger(mode="async", project="team/proj", api_key=_token(url), connect_timeout=0.5)
        loggers.append(logger)
        with pytest.raises(NeptuneServerUnreachableError, match="timed out"):
            _ = logger.experiment


def test_online_modes_need_token_and_project(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="needs the API token.*NEPTUNE_API_TOKEN.*mode='offline'"):
        NeptuneLogger(mode="async", project="team/proj")
    with pytest.raises(ValueError, match="needs a project.*NEPTUNE_PROJECT"):
        NeptuneLogger(mode="sync", api_key=_token("http://127.0.0.1:1"))
    with pytest.raises(ValueError, match="hosted app.*shut down"):
        NeptuneLogger(mode="async", project="team/proj", api_key="ANONYMOUS")
    with pytest.raises(ValueError, match="not valid"):
        NeptuneLogger(mode="async", project="team/proj", api_key="garbage")
    with pytest.raises(ValueError, match="'read-only' cannot log"):
        NeptuneLogger(mode="read-only")
    with pytest.raises(TypeError, match="unknown neptune.init_run.*capture_everything"):
        NeptuneLogger(mode="debug", capture_everything=True)
    # No mode anywhere: a token means a server, no token means offline.
    assert NeptuneLogger()._mode == "offline"
    monkeypatch.setenv("NEPTUNE_API_TOKEN", _token("http://127.0.0.1:1"))
    monkeypatch.setenv("NEPTUNE_PROJECT", "team/proj")
    assert NeptuneLogger()._mode == "async"
    monkeypatch.setenv("NEPTUNE_MODE", "debug")
    assert NeptuneLogger()._mode == "debug"


def test_other_ranks_never_open_a_run(monkeypatch: pytest.MonkeyPatch, neptune_dir: Path) -> None:
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = NeptuneLogger(mode="offline")
    logger.log_hyperparams({"a": 1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("success")
    assert logger.version is None
    assert type(logger.experiment).__name__ == "_DummyExperiment"
    assert logger._run is None and not (neptune_dir / "offline").exists()


def test_pickled_logger_opens_its_own_run_only_on_rank_zero(
    monkeypatch: pytest.MonkeyPatch, neptune_dir: Path, loggers: list[NeptuneLogger]
) -> None:
    fresh = pickle.loads(pickle.dumps(NeptuneLogger(mode="offline", name="p")))  # as ddp_spawn sends it
    assert fresh._run is None and fresh.name == "p"

    parent = NeptuneLogger(mode="offline")
    loggers.append(parent)
    parent.log_metrics({"loss": 1.0}, step=0)  # the parent opened a run before "spawning"
    blob = pickle.dumps(parent)

    monkeypatch.setattr(rank_zero_only, "rank", 1)
    worker1 = pickle.loads(blob)
    worker1.log_metrics({"loss": 2.0}, step=1)
    assert worker1._run is None

    monkeypatch.setattr(rank_zero_only, "rank", 0)
    worker0 = pickle.loads(blob)
    loggers.append(worker0)
    with pytest.warns(UserWarning, match="cannot be reopened"):
        worker0.log_metrics({"loss": 3.0}, step=1)
    worker0.finalize("success")
    parent.finalize("success")
    assert worker0.version != parent.version
    assert sorted(p.name for p in (neptune_dir / "offline").iterdir()) == sorted(
        [parent.offline_dir.name, worker0.offline_dir.name]
    )
    assert _series(_operations(worker0.offline_dir))["training/loss"] == [(1, 3.0)]


def test_wraps_an_existing_run_and_rejects_mixed_arguments(loggers: list[NeptuneLogger]) -> None:
    import neptune

    run = neptune.init_run(
        mode="debug", capture_hardware_metrics=False, capture_stdout=False, capture_stderr=False, git_ref=False
    )
    with pytest.raises(ValueError, match="drop the run-creation arguments"):
        NeptuneLogger(run=run, project="x/y")
    logger = NeptuneLogger(run=run["finetune"])
    loggers.append(logger)
    logger.log_metrics({"loss": 1.5, "gpu/rank0/util_pct": 50.0}, step=1)
    run.wait()
    assert run["finetune/training/loss"].fetch_values()["value"].tolist() == [1.5]
    assert run["finetune/monitoring/rank0/gpu/util_pct"].fetch_values()["value"].tolist() == [50.0]
    assert run["lightning_mgpu/metrics_prefix"].fetch() == "finetune/training"
