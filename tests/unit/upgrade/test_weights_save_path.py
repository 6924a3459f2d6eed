"""``Trainer(weights_save_path=X)`` -> ``default_root_dir=X`` where every ModelCheckpoint has its folder and the
logger is given (rule ``trainer-weights-save-path``, :mod:`lightning_mgpu.upgrade.trainer_weights_path`): then X held
only SLURM's pre-emption checkpoint, which 2.x keeps in ``default_root_dir``. Anywhere else the TODO stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="the upgrade tool needs the [upgrade] extra")

from tests.helpers.upgrade_check import upgraded  # noqa: E402

TODO = "TODO(lightning-mgpu:trainer-weights-save-path)"

SCRIPT = """\
import os

from pytorch_lightning import Trainer, loggers
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint


def build_runner(save_to, log_to):
    saver = ModelCheckpoint(dirpath=os.path.join(save_to, "ckpts"), monitor="val_f1")
    return Trainer(
        logger=loggers.TensorBoardLogger(log_to),
        callbacks=[saver, EarlyStopping(monitor="val_f1")],
        weights_save_path=save_to,
        max_epochs=2,
    )
"""


def test_every_folder_given_becomes_default_root_dir() -> None:
    out = upgraded(SCRIPT, no_todo=True, no_unmarked=True)
    assert "        default_root_dir=save_to,\n" in out and "weights_save_path" not in out


@pytest.mark.parametrize(
    "change",
    [
        ("logger=loggers.TensorBoardLogger(log_to),", ""),  # the default logger would move to X
        ('dirpath=os.path.join(save_to, "ckpts"), ', ""),  # a checkpoint without a folder saved under X
        ("callbacks=[saver, ", "callbacks=[saver, MyCallback(), "),  # the script's own callback: it may be one
        ("max_epochs=2,", "max_epochs=2, default_root_dir=log_to,"),  # 1.x kept the two folders apart
        ("    return Trainer(", "    print(Trainer.default_root_dir)\n    return Trainer("),  # read elsewhere
        ('callbacks=[saver, EarlyStopping(monitor="val_f1")],', 'callbacks=[EarlyStopping(monitor="val_f1")],'),
    ],
)
def test_otherwise_the_todo_stays(change: tuple[str, str]) -> None:
    out = upgraded(SCRIPT.replace(*change))
    assert TODO in out and "default_root_dir=save_to" not in out


def test_2x_keeps_slurms_checkpoint_where_1x_weights_save_path_did(tmp_path: Path) -> None:
    # 1.x (1.0-1.9): hpc_save / the hpc restore read trainer.weights_save_path; 2.x reads default_root_dir.
    pytest.importorskip("pytorch_lightning")
    namespace: dict[str, object] = {}
    exec(compile(upgraded(SCRIPT, no_todo=True), "<converted>", "exec"), namespace)  # noqa: S102
    save_to = tmp_path / "weights"
    save_to.mkdir()
    (save_to / "hpc_ckpt_3.ckpt").write_bytes(b"")
    runner = namespace["build_runner"](str(save_to), str(tmp_path / "logs"))  # type: ignore[operator]
    assert runner._checkpoint_connector._hpc_resume_path == os.path.join(save_to, "hpc_ckpt_3.ckpt")
    saver = runner.checkpoint_callback
    assert saver.dirpath == os.path.join(save_to, "ckpts")  # its own folder, as in 1.x
