"""``examples/train.py --launcher ray`` on a real two-node Ray cluster (``ray start`` twice, 1 CPU per node), and the
local Ray the launcher starts when it is given no address.

The Ray run is compared with the same script launched by Lightning on 2 processes, one thread each (Ray gives each
1-CPU worker one thread; another thread count sums matrix products in another order): the trained parameters must be
equal. That covers the sampler, the effective batch, the process group Ray sets up, and a resume from Ray's
checkpoint after a worker was killed.
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
from tests.helpers.ray_cluster import ahead_of_the_tests
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


EPOCHS = 2
ACCUMULATION = 2
#: Joining the two-node cluster: the bundle's sharded strategy with its callbacks inside the Ray workers, on data
#: preprocessed on the same cluster (the reference run preprocesses with local processes: the cache is the same),
#: saving sharded folders (--checkpoint-format reaches the strategy under Ray too). A worker is killed after the first
#: epoch, so Ray Train restarts the group and it resumes from that sharded folder.
FLAGS = [
    "--strategy",
    "sharded",
    "--checkpoint-format",
    "sharded",
    "--max-epochs",
    str(EPOCHS),
    "--accumulate-grad-batches",
    str(ACCUMULATION),
    "--grad-sync-toggle",
    "--activation-checkpointing",
    "features.*",
    "--zero-grad-set-to-none",
    "--gpu-monitor",
    "--preprocess",
    "ray",
]


def _raylets(under: str) -> int:
    """Raylets whose session lives under ``under``: the run's own, not another Ray on this machine."""
    ps = run(["ps", "-eo", "args"], timeout=30).stdout
    return sum(1 for line in ps.splitlines() if line and line.split()[0].endswith("/raylet") and under in line)


def _registered_checkpoints(storage: Path) -> list[str]:
    try:
        snapshot = json.loads((storage / "checkpoint_manager_snapshot.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or caught mid-write
        return []
    return [c["checkpoint_dir_name"] for c in snapshot.get("checkpoint_results", [])]


def _kill_a_worker_once_a_checkpoint_is_registered(proc: subprocess.Popen, storage: Path) -> None:
    """SIGKILL one Ray Train worker once Ray's controller has registered a checkpoint (its snapshot lists it).

    A checkpoint folder alone is not enough: a kill before the controller collects the report restarts from scratch,
    which is right but tests nothing.
    """
    deadline = time.monotonic() + 300
    while not _registered_checkpoints(storage):
        assert proc.poll() is None, proc.communicate()[0][-6000:]
        assert time.monotonic() < deadline, "Ray registered no checkpoint within 300 s"
        time.sleep(0.05)
    ps = run(["ps", "-eo", "pid,args"], timeout=30).stdout
    workers = [int(line.split()[0]) for line in ps.splitlines() if "ray::RayTrainWorker" in line]
    assert workers, ps
    os.kill(workers[-1], signal.SIGKILL)


# The extended tier: about 200 s of one CI worker (a Ray cluster, a killed worker, its restart and the Lightning-
# launched run beside it); test_without_an_address_a_local_ray_is_started_for_the_workers_and_stopped_after keeps
# the Ray launcher in the default tier.
@pytest.mark.extended
def test_a_ray_train_run_survives_a_killed_worker_and_equals_the_lightning_launched_run(
    ray_cluster, tmp_path: Path
) -> None:
    """One ``--launcher ray`` run joining the cluster by address, with a worker killed after the first epoch: Ray Train
    restarts the group, it resumes from the sharded folder Ray kept, and the trained parameters equal the same
    script's uninterrupted run launched by Lightning. One Ray run for all of it: each costs a minute of Ray's own
    start-up here (its controller and a worker group), before any training."""
    pytest.importorskip("fairscale")
    proc = _start_ray_run(ray_cluster, tmp_path / "ray", *FLAGS, "--max-failures", "1", address=ray_cluster.address)
    try:
        _kill_a_worker_once_a_checkpoint_is_registered(proc, tmp_path / "ray" / "ray" / "lightning_mgpu")
        log = _finish(proc)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    # It joined and started no Ray; preprocessing reused the launcher's connection instead of making a second one.
    assert log.count("Ray: connecting to the cluster at") == 1 and "Ray: starting" not in log, log[-4000:]
    assert any((tmp_path / "ray" / "cache").rglob("*")), "nothing was cached on the cluster"
    assert "Ray Train restarted the workers: resuming from" in log, log[-6000:]
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    # Metrics and the checkpoint came back to the driver, which wrote the summary.
    assert summary["launcher"] == "ray" and summary["world_size"] == 2
    assert summary["effective_batch_size"] == 32 * 2 * ACCUMULATION
    # 23 batches per rank and epoch; Lightning steps on every second one and on the epoch's last.
    assert summary["epochs"] == EPOCHS and summary["global_step"] == EPOCHS * -(-23 // ACCUMULATION)
    assert summary["val_acc"] is not None
    ckpt = Path(summary["checkpoint_path"])
    assert ckpt.exists() and ckpt.is_relative_to(tmp_path / "ray" / "ray")
    assert is_sharded_checkpoint(ckpt), ckpt
    # Only world rank 0 prints the topology: in each worker group, the first and the restarted one.
    rank0 = {pid for pid, rank in re.findall(r"pid=(\d+)\) world_rank=(\d+)", log) if rank == "0"}
    printed = set(re.findall(r"RayTrainWorker pid=(\d+)\)\S* strategy=", log))
    assert len(rank0) == 2 and printed == rank0, (printed, rank0)

    rest = [
        ("processes" if f == "ray" else f) for f in FLAGS[2:]
    ]  # all but --strategy NAME; --preprocess ray -> processes
    run_python(
        [TRAIN, "--strategy", "sharded", "--devices", "2", "--output-dir", str(tmp_path / "local"), *COMMON, *rest],
        timeout=300,
        env=ONE_THREAD,
    )
    reference = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert abs(summary["val_acc"] - reference["val_acc"]) <= 0.01
    # Resumed from an epoch-end checkpoint with the RNG states and data order: the uninterrupted run's parameters.
    _assert_equal(_parameters(ckpt), _parameters(tmp_path / "local" / "checkpoints" / "last.ckpt"))


LOCAL_RAY = """
import sys
from pathlib import Path

import ray

from lightning_mgpu.launchers.ray_train import RayLaunch, ray_cluster

with ray_cluster(RayLaunch(num_workers=2, storage_path=Path(sys.argv[1]))):
    print("cpus", int(ray.cluster_resources()["CPU"]), "nodes", len(ray.nodes()))
print("initialized after the block:", ray.is_initialized())
"""


def test_without_an_address_a_local_ray_is_started_for_the_workers_and_stopped_after(tmp_path: Path) -> None:
    """No ``--ray-address``: the launcher starts a Ray of its own, one node sized for the workers, and stops it when
    the block ends. Started alone (no training: the restart above runs on the session's cluster), and after that
    cluster is gone (this test does not use it), so that the two Rays never run side by side on these 2 cores."""
    # The local Ray's session goes under a folder of its own (short: Ray's socket paths must fit 107 bytes), so that
    # its raylet is told apart from any other Ray on the machine.
    ray_tmp = tempfile.mkdtemp(prefix="lmgpu-ray-")
    try:
        # Ahead of the other worker's job, as the session cluster's daemons (tests/helpers/ray_cluster.py).
        proc = start(
            [sys.executable, "-c", LOCAL_RAY, str(tmp_path)],
            env={"RAY_TMPDIR": ray_tmp, **ONE_THREAD},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=ahead_of_the_tests,
        )
        out = finish(proc, 180, expect=0, what="the local Ray")
        assert "cpus 2 nodes 1" in out and "initialized after the block: False" in out, out[-4000:]
        assert any(Path(ray_tmp).glob("ray/session_*")), (
            "the local Ray did not run under RAY_TMPDIR: the check below would see nothing"
        )
        deadline = time.monotonic() + 30  # ray.shutdown() has returned; its raylet exits a moment later
        while _raylets(ray_tmp) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _raylets(ray_tmp) == 0, "the local Ray started for the run is still running"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
