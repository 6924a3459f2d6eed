"""torchrun's elastic restart: a worker SIGKILLed mid-run, torchrun restarts the group, ``train.py`` resumes by itself.

``torchrun --max-restarts 1`` starts the workers again with ``TORCHELASTIC_RESTART_COUNT=1``; ``--resume auto`` (the
default) then resumes from ``OUTPUT_DIR/checkpoints/last.ckpt``, the last complete epoch-end checkpoint (they land
atomically). The finished run's parameters must equal an uninterrupted run's: the interrupted epoch is redone from
its start with the same data order and RNG states, never counted twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.launch import (
    REPO_ROOT,
    descendants,
    finish,
    kill_tree,
    run_python,
    start,
)

TRAIN = str(REPO_ROOT / "examples" / "train.py")
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
EPOCHS = "8"
COMMON = ["--strategy", "ddp", "--devices", "2", "--max-epochs", EPOCHS, "--logger", "none", "--accelerator", "cpu"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # torchrun sets it to 1 per worker; the reference run must match


def _state(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.timeout(600)
def test_a_killed_worker_restarts_under_torchrun_and_resumes_exactly(tmp_path: Path) -> None:
    out = tmp_path / "elastic"
    cmd = [
        TORCHRUN,
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        TRAIN,
        "--output-dir",
        str(out),
        *COMMON,
    ]
    agent = start(
        cmd, env=ONE_THREAD, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        last = out / "checkpoints" / "last.ckpt"
        while not last.is_file():  # the first epoch's checkpoint: from here on a restart has something to resume
            assert agent.poll() is None, agent.communicate()[0][-6000:]
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.05)
        workers = descendants(agent.pid)
        assert len(workers) == 2, workers
        os.kill(workers[1], signal.SIGKILL)
        log = finish(agent, timeout=300)  # the restarted job finishes: exit 0
    finally:
        if agent.poll() is None:
            kill_tree(agent.pid)  # the agent and its workers (each in a session of its own), never an orphan
    assert "restart 1: resuming from" in log, log[-6000:]

    run_python([TRAIN, "--output-dir", str(tmp_path / "uninterrupted"), *COMMON], timeout=300, env=ONE_THREAD)
    resumed, reference = (
        _state(out / "checkpoints" / "last.ckpt"),
        _state(tmp_path / "uninterrupted" / "checkpoints" / "last.ckpt"),
    )
    assert resumed.keys() == reference.keys()
    worst = max((resumed[k].double() - reference[k].double()).abs().max().item() for k in resumed)
    assert worst == 0.0, f"the restarted run differs from the uninterrupted one by {worst}"
    assert (
        torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 8 * 23
    )
