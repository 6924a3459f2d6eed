"""torchrun ``--max-restarts 3``: a worker SIGKILLed mid-run is restarted, ``train.py --resume auto`` resumes from the
last complete checkpoint by itself, and the finished run's parameters equal an uninterrupted run's."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.launch import REPO_ROOT, clean_environ

TRAIN = str(REPO_ROOT / "examples" / "train.py")
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
ARGS = ["--strategy", "ddp", "--devices", "2", "--max-epochs", "12", "--logger", "none", "--accelerator", "cpu"]
ENV = {**clean_environ(), "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]


def _run(out: Path, kill_after_first_checkpoint: bool) -> tuple[str, bool]:
    cmd = [TORCHRUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "3", TRAIN, *ARGS, "--output-dir", str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True)  # its own group: a failure kills the agent and its workers
    killed = False
    try:
        if kill_after_first_checkpoint:
            deadline = time.monotonic() + 180
            while not (out / "checkpoints" / "last.ckpt").is_file() and proc.poll() is None:
                assert time.monotonic() < deadline, "no checkpoint within 180 s"
                time.sleep(0.05)
            workers = _children(proc.pid)
            if proc.poll() is None and workers:
                os.kill(workers[-1], signal.SIGKILL)  # a worker dies mid-run (an OOM kill, a lost node)
                killed = True
        log, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the agent and its workers, never an orphan
            proc.wait()
    assert proc.returncode == 0, log[-4000:]
    return log, killed


def _parameters(out: Path) -> dict[str, torch.Tensor]:
    state = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    return {k: v for k, v in state.items() if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))}


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_killed_worker_is_restarted_and_resumes_exactly(tmp_path: Path) -> None:
    log, killed = _run(tmp_path / "killed", kill_after_first_checkpoint=True)
    assert killed, "the run finished before a worker could be killed"
    # torchrun's restarted round itself sometimes fails to connect gloo (seen 1 in 4 here); the next restart
    # resumes from the same last.ckpt, so the result is the same.
    assert re.search(r"restart \d: resuming from", log), log[-4000:]
    reference, _ = _run(tmp_path / "reference", kill_after_first_checkpoint=False)
    assert "resuming" not in reference
    resumed, straight = _parameters(tmp_path / "killed"), _parameters(tmp_path / "reference")
    assert resumed.keys() == straight.keys()
    worst = max((resumed[k] - straight[k]).abs().max().item() for k in resumed)
    assert worst == 0.0, f"the restarted run differs from an uninterrupted one by {worst}"
    # Both ran all 12 epochs: no epoch skipped, and the interrupted one was redone from its start, not added twice.
    for folder in ("killed", "reference"):
        assert torch.load(tmp_path / folder / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["epoch"] == 11
