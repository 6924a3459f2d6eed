"""Promises 2 and 5: a kill during a save, a full disk or a read-only folder never costs the previous checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lightning_mgpu.checkpoint.io import (
    AtomicCheckpointIO,
    CheckpointSaveError,
    load_checkpoint_file,
    read_checkpoint,
)
from lightning_mgpu.checkpoint.sharded import (
    temporary_folder,
    write_sharded_checkpoint,
)
from tests.helpers.launch import finish, start

KILL_TRIALS = 12


def _consistent(path: Path) -> int:
    """The version of a complete checkpoint; fails on a torn one."""
    checkpoint = read_checkpoint(path)  # a file or a sharded folder
    version = checkpoint["version"]
    assert all(torch.equal(t, torch.full_like(t, float(version))) for t in checkpoint["state_dict"].values())
    return version


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", ["file", "sharded"])
def test_sigkill_during_saves_never_leaves_a_torn_checkpoint(tmp_path: Path, fmt: str) -> None:
    """Either format: a file renamed into place, or a sharded folder swapped in with RENAME_EXCHANGE."""
    outcomes = []
    # One server forks each trial's saving process (see run_save_loop): the kill hits a process mid-save as before.
    server = start(
        [sys.executable, "-m", "tests.integration.runners.run_save_loop"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for trial in range(KILL_TRIALS):
            _one_kill_during_a_save(server, tmp_path, trial, outcomes, fmt)
    except BaseException:
        server.kill()
        server.communicate(timeout=30)
        raise
    finish(server, timeout=30, what="the save server")  # the end of its input ends it: exit 0
    # The kills landed both before and after renames: the trials exercised the torn-write window.
    print(f"kill-during-save trials: {len(outcomes)}, in-progress save already renamed in {sum(outcomes)}")


def _one_kill_during_a_save(
    server: subprocess.Popen, tmp_path: Path, trial: int, outcomes: list[bool], fmt: str
) -> None:
    rng = random.Random(1000 + trial)  # printed below on failure: rerun the one trial with this seed
    out = tmp_path / f"trial{trial}"
    out.mkdir()
    server.stdin.write(f"{out} {fmt}\n")
    server.stdin.flush()
    line = server.stdout.readline()
    assert line.strip().isdigit(), f"the save server did not fork a child (it said {line!r})"
    pid = int(line)
    try:
        # Wait until some saves completed, then kill at a random moment of a later save.
        deadline = time.monotonic() + 60
        while not (out / "saving").exists() or int((out / "saving").read_text() or 0) < 2 + rng.randrange(3):
            assert server.poll() is None and Path(f"/proc/{pid}").exists(), "the save loop died"
            assert time.monotonic() < deadline, "the save loop made no progress"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.08))
    finally:
        os.kill(pid, signal.SIGKILL)
    assert server.stdout.readline().strip() == "reaped"  # the child is gone: what it left on disk is final
    saving = int((out / "saving").read_text())
    try:
        version = _consistent(out / "ckpt" / "last.ckpt")
    except Exception as err:  # noqa: BLE001 - report the seed with any failure
        raise AssertionError(
            f"trial {trial} (seed {1000 + trial}): last.ckpt is not a complete checkpoint: {err}"
        ) from err
    # last.ckpt is the save in progress (if its rename happened) or the one before it: never older, never torn.
    assert version in (saving, saving - 1), f"trial {trial}: last.ckpt holds version {version}, saving {saving}"
    outcomes.append(version == saving)
    # The checkpoint folder holds last.ckpt and at most the killed save's hidden temporary; the next save removes it.
    folder = out / "ckpt"
    temporaries = {p.name for p in folder.glob(".last.ckpt.*.tmp")} | {
        p.name for p in folder.glob(".last.ckpt.*.tmp-dir")
    }
    assert {p.name for p in folder.iterdir()} <= {"last.ckpt"} | temporaries
    if fmt == "sharded":
        path = folder / "last.ckpt"
        write_sharded_checkpoint(
            {"version": 0, "state_dict": {"w": torch.zeros(1)}}, path, temporary_folder(path), True, no_dist=True
        )
    else:
        AtomicCheckpointIO().save_checkpoint({"version": 0, "state_dict": {}}, folder / "last.ckpt")
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]


def _state(mb: float) -> dict:
    return {"state_dict": {"w": torch.zeros(int(mb * 2**20 / 4))}}


def test_a_full_disk_names_the_path_and_keeps_the_previous_checkpoint(small_disk: Path) -> None:
    io = AtomicCheckpointIO()
    target = small_disk / "last.ckpt"
    io.save_checkpoint({"version": 1, **_state(1.5)}, target)
    with pytest.raises(
        CheckpointSaveError,
        match=rf"Could not save the checkpoint {target}: .*(space|write).*previous checkpoint at that path is intact",
    ):
        io.save_checkpoint({"version": 2, **_state(3.0)}, target)
    assert load_checkpoint_file(target)["version"] == 1
    assert sorted(p.name for p in small_disk.iterdir()) == ["last.ckpt"]  # the partial temporary was removed


def test_an_unwritable_folder_names_the_path_and_the_fix(readonly_dir: Path) -> None:
    target = readonly_dir / "last.ckpt"
    with pytest.raises(
        CheckpointSaveError,
        match=rf"Could not save the checkpoint {target}: Read-only file system.*another --output-dir",
    ):
        AtomicCheckpointIO().save_checkpoint({"version": 1}, target)
    assert target.read_bytes() == b"previous"


def test_a_full_disk_during_training_fails_clearly(small_disk: Path) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lightning_mgpu.testing.parity import ParityModule
    from tests.helpers.trainer import quiet_trainer

    class Big(ParityModule):
        def __init__(self) -> None:
            super().__init__(global_batch=8, num_samples=32)
            self.ballast = torch.nn.Parameter(torch.zeros(700_000), requires_grad=False)  # ~2.8 MB per checkpoint

    ckpt = ModelCheckpoint(dirpath=small_disk, save_last=True, every_n_train_steps=1, save_top_k=-1)
    trainer = quiet_trainer(strategy="sharded", max_steps=4, callbacks=[ckpt], enable_checkpointing=True)
    with pytest.raises(CheckpointSaveError, match=str(small_disk)):
        trainer.fit(Big())
    complete = [p for p in small_disk.glob("*.ckpt")]
    assert complete and all(load_checkpoint_file(p)["state_dict"] for p in complete)
