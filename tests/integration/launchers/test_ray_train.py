"""``examples/train.py --launcher ray`` on a real two-node Ray cluster (``ray start`` twice, 1 CPU per node).

Each Ray run is compared with the same script launched by Lightning on 2 processes, one thread each (Ray gives
each 1-CPU worker one thread; another thread count sums matrix products in another order): the trained
parameters must be equal. That covers the sampler, the effective batch, the process group Ray sets up, and a
resume from Ray's checkpoint after a worker was killed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from lightning_mgpu.checkpoint.sharded import is_sharded_checkpoint
from lightning_mgpu.testing.parity import max_abs_diff
from tests.helpers.launch import REPO_ROOT, finish, launch_env, run, run_python, start
from tests.helpers.runif import RunIf

pytestmark = [pytest.mark.timeout(600), *RunIf(ray=True).marks]

TRAIN = str(REPO_ROOT / "examples" / "train.py")
COMMON = ["--logger", "none", "--accelerator", "cpu"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def _ray_env(cluster) -> dict[str, str]:
    # RAY_DEDUP_LOGS=0: each worker's lines keep their own pid (the test reads who printed what).
    # ONE_THREAD: a local Ray started by the run inherits the driver's environment (see ONE_THREAD above).
    return launch_env({**cluster.env, "RAY_DEDUP_LOGS": "0", **ONE_THREAD})


def _start_ray_run(
    cluster, out: Path, *flags: str, address: str | None = "cluster", env: dict[str, str] | None = None
) -> subprocess.Popen:
    where = (
        ["--ray-address", cluster.address]
        if address == "cluster"
        else ([] if address is None else ["--ray-address", address])
    )
    cmd = [
        sys.executable,
        TRAIN,
        "--launcher",
        "ray",
        "--ray-workers",
        "2",
        *where,
        "--output-dir",
        str(out),
        *COMMON,
        *flags,
    ]
    return start(
        cmd,
        environ={**_ray_env(cluster), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 400) -> str:
    return finish(proc, timeout, expect=0, what="the Ray run")


def _parameters(ckpt: Path) -> dict[str, torch.Tensor]:
    from lightning_mgpu.checkpoint.io import read_checkpoint

    state = read_checkpoint(ckpt)["state_dict"]  # a file, or a sharded folder
    return {k: v for k, v in state.items() if not k.endswith(_BUFFERS)}


def _assert_equal(ray: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    worst = max_abs_diff(ray, reference)  # the same keys, or it fails
    assert worst == 0.0, f"Ray run differs from the Lightning-launched run by {worst}"


def _workers_by_rank(log: str) -> dict[int, str]:
    """World rank -> pid, from Ray Train's 'Started training worker group' lines (the last group started)."""
    found = dict(re.findall(r"pid=(\d+)\) world_rank=(\d+)", log))
    return {int(rank): pid for pid, rank in found.items()}


CASES = {
    # Joining the two-node cluster; the bundle's sharded strategy with its callbacks inside the Ray workers, on data
    # preprocessed on the same cluster (the reference run preprocesses with local processes: the cache is the same),
    # saving sharded folders (--checkpoint-format reaches the strategy under Ray too).
    "sharded+callbacks-cluster": [
        "--strategy",
        "sharded",
        "--checkpoint-format",
        "sharded",
        "--max-epochs",
        "1",
        "--accumulate-grad-batches",
        "2",
        "--grad-sync-toggle",
        "--activation-checkpointing",
        "features.*",
        "--zero-grad-set-to-none",
        "--gpu-monitor",
        "--preprocess",
        "ray",
    ],
}


def _raylets(under: str) -> int:
    """Raylets whose session lives under ``under``: the run's own, not another Ray on this machine."""
    ps = run(["ps", "-eo", "args"], timeout=30).stdout
    return sum(1 for line in ps.splitlines() if line and line.split()[0].endswith("/raylet") and under in line)


def _assert_local_ray_ran_and_stopped(log: str, ray_tmp: str) -> None:
    assert "Ray: starting a local instance with 2 CPUs for 2 workers" in log, log[-4000:]
    assert any(Path(ray_tmp).glob("ray/session_*")), (
        "the local Ray did not run under RAY_TMPDIR: the check below would see nothing"
    )
    deadline = time.monotonic() + 30  # ray.shutdown() has returned; its raylet exits a moment later
    while _raylets(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _raylets(ray_tmp) == 0, "the local Ray started for the run is still running"


@pytest.mark.parametrize("case", list(CASES))
def test_ray_train_run_equals_the_lightning_launched_run(case: str, ray_cluster, tmp_path: Path) -> None:
    flags = CASES[case]
    strategy = flags[1]
    if strategy == "sharded":
        pytest.importorskip("fairscale")
    log = _finish(_start_ray_run(ray_cluster, tmp_path / "ray", *flags, address=ray_cluster.address))
    # It joined and started no Ray; preprocessing reused the launcher's connection instead of making a second one.
    assert log.count("Ray: connecting to the cluster at") == 1 and "Ray: starting" not in log, log[-4000:]
    if "--preprocess" in flags:
        assert any((tmp_path / "ray" / "cache").rglob("*")), "nothing was cached on the cluster"
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    # Metrics and the checkpoint came back to the driver, which wrote the summary.
    accumulation = (
        int(flags[flags.index("--accumulate-grad-batches") + 1]) if "--accumulate-grad-batches" in flags else 1
    )
    assert summary["launcher"] == "ray" and summary["world_size"] == 2
    assert summary["effective_batch_size"] == 32 * 2 * accumulation
    assert summary["epochs"] == 1 and summary["val_acc"] is not None
    ckpt = Path(summary["checkpoint_path"])
    assert ckpt.exists() and ckpt.is_relative_to(tmp_path / "ray" / "ray")
    folder = "--checkpoint-format" in flags and flags[flags.index("--checkpoint-format") + 1] == "sharded"
    assert is_sharded_checkpoint(ckpt) == folder, ckpt
    # Only world rank 0 prints the topology.
    pids = _workers_by_rank(log)
    printed = set(re.findall(r"RayTrainWorker pid=(\d+)\)\S* strategy=", log))
    assert printed == {pids[0]}, (printed, pids)

    rest = [
        ("processes" if f == "ray" else f) for f in flags[2:]
    ]  # all but --strategy NAME; --preprocess ray -> processes
    run_python(
        [TRAIN, "--strategy", strategy, "--devices", "2", "--output-dir", str(tmp_path / "local"), *COMMON, *rest],
        timeout=300,
        env=ONE_THREAD,
    )
    reference = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert abs(summary["val_acc"] - reference["val_acc"]) <= 0.01
    _assert_equal(_parameters(ckpt), _parameters(tmp_path / "local" / "checkpoints" / "last.ckpt"))


def _registered_checkpoints(storage: Path) -> list[str]:
    try:
        snapshot = json.loads((storage / "checkpoint_manager_snapshot.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or caught mid-write
        return []
    return [c["checkpoint_dir_name"] for c in snapshot.get("checkpoint_results", [])]


def test_a_local_ray_run_restarts_a_killed_worker_resumes_exactly_and_stops_its_ray(
    ray_cluster, tmp_path: Path
) -> None:
    """A Ray started for the run (no ``--ray-address``), a worker killed after Ray registered a checkpoint: Ray Train
    restarts the workers, they resume, the parameters equal the uninterrupted Lightning-launched ``ddp`` run's, and the
    local Ray is gone after the run. One launch for the three checks (a local Ray costs about 20 s to start)."""
    epochs = "4"
    # The local Ray's session goes under a folder of its own (short: Ray's socket paths must fit 107 bytes), so that
    # its raylet is told apart from the session cluster's and from any other Ray on the machine.
    ray_tmp = tempfile.mkdtemp(prefix="lmgpu-ray-")
    proc = _start_ray_run(
        ray_cluster,
        tmp_path / "ray",
        "--strategy",
        "ddp",
        "--max-epochs",
        epochs,
        "--max-failures",
        "1",
        address=None,
        env={"RAY_TMPDIR": ray_tmp},
    )
    storage = tmp_path / "ray" / "ray" / "lightning_mgpu"
    killed = None
    try:
        deadline = time.monotonic() + 300
        # Kill once Ray's controller has registered a checkpoint (its snapshot lists it). A checkpoint folder alone
        # is not enough: a kill before the controller collects the report restarts from scratch, which is right
        # but tests nothing.
        while not _registered_checkpoints(storage):
            assert proc.poll() is None, proc.communicate()[0][-6000:]
            assert time.monotonic() < deadline, "Ray registered no checkpoint within 300 s"
            time.sleep(0.05)
        ps = run(["ps", "-eo", "pid,args"], timeout=30).stdout
        workers = [int(line.split()[0]) for line in ps.splitlines() if "ray::RayTrainWorker" in line]
        assert workers, ps
        killed = workers[-1]
        os.kill(killed, signal.SIGKILL)
        log = _finish(proc)
        _assert_local_ray_ran_and_stopped(log, ray_tmp)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert "Ray Train restarted the workers: resuming from" in log, log[-6000:]
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert summary["epochs"] == int(epochs) and summary["global_step"] == int(epochs) * 23

    run_python(
        [
            TRAIN,
            "--strategy",
            "ddp",
            "--devices",
            "2",
            "--max-epochs",
            epochs,
            "--output-dir",
            str(tmp_path / "local"),
            *COMMON,
        ],
        timeout=300,
        env=ONE_THREAD,
    )
    # Resumed from an epoch-end checkpoint with the RNG states and data order: the uninterrupted run's parameters.
    _assert_equal(
        _parameters(Path(summary["checkpoint_path"])), _parameters(tmp_path / "local" / "checkpoints" / "last.ckpt")
    )
