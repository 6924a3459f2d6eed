"""``ModelCheckpoint(X)``: the first parameter was ``filepath`` in 1.0-1.1 and is ``dirpath`` from 1.2 (rule
``checkpoint-positional-path``). The tool converts X as ``filepath=`` only where the call says it was 1.0-1.1's (a
name pattern or a .ckpt file as its last part), keeps it where the call says 1.2+ (``dirpath=``/``filename=``
beside it), and otherwise leaves a TODO naming the choice."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="the upgrade tool needs the [upgrade] extra")

from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

from lightning_mgpu.upgrade.legacy_checkpoint import legacy_checkpoint_filepath  # noqa: E402
from tests.helpers.upgrade_check import upgraded  # noqa: E402

TODO = "TODO(lightning-mgpu:checkpoint-positional-path)"

LITERAL_PATTERN = """\
from pytorch_lightning.callbacks import ModelCheckpoint

saver = ModelCheckpoint("weights/{epoch:03d}-{val_f1:.3f}", monitor="val_f1", mode="max")
"""

JOINED_PATTERN = """\
import os

import pytorch_lightning as pl


def make_saver(run_root, tag):
    return pl.callbacks.ModelCheckpoint(os.path.join(run_root, tag, "{epoch}"), monitor="val_f1")
"""

BESIDE_FILENAME = """\
from pytorch_lightning.callbacks import ModelCheckpoint


def make_saver(run_root):
    return ModelCheckpoint(run_root, filename="best-{epoch}", save_top_k=1)
"""

FOLDER_ONLY = """\
from pytorch_lightning.callbacks import ModelCheckpoint


def make_saver(run_root):
    return ModelCheckpoint(f"{run_root}/saved", save_top_k=2)
"""

TWO_POSITIONAL = """\
from pytorch_lightning.callbacks import ModelCheckpoint

saver = ModelCheckpoint("weights/{epoch}", "val_f1")
"""


def test_a_literal_pattern_is_1_0s_filepath_split() -> None:
    out = upgraded(LITERAL_PATTERN, no_todo=True, no_unmarked=True)
    assert (
        'ModelCheckpoint(dirpath="weights", filename="{epoch:03d}-{val_f1:.3f}", monitor="val_f1", mode="max")' in out
    )


def test_a_joined_pattern_is_split_at_run_time() -> None:
    out = upgraded(JOINED_PATTERN, no_todo=True, no_unmarked=True)
    assert 'ModelCheckpoint(**legacy_checkpoint_filepath(os.path.join(run_root, tag, "{epoch}")), monitor=' in out
    assert "from lightning_mgpu.upgrade.legacy_checkpoint import legacy_checkpoint_filepath" in out


NAMED_PATTERN = """\
from pytorch_lightning.callbacks import ModelCheckpoint


def make_saver(experiment_dir, reassign):
    target = experiment_dir + "/checkpoints/{epoch:02d}_{val_loss:.3f}"
    if reassign:
        target = experiment_dir + "/other/{epoch}"
    return ModelCheckpoint(target, save_top_k=2)


def make_folder_saver(experiment_dir):
    target = experiment_dir + "/checkpoints"
    return ModelCheckpoint(target, save_top_k=2)
"""


def test_a_name_every_assignment_of_which_is_a_pattern_is_split_at_run_time() -> None:
    """A name given a pattern in every assignment of its scope (a real 1.0-era shape): 1.0-1.1's filepath, split at
    run time; a name given a folder keeps the TODO (it was left for a person, not split)."""
    out = upgraded(NAMED_PATTERN)
    assert "ModelCheckpoint(**legacy_checkpoint_filepath(target), save_top_k=2)" in out
    assert out.count(TODO) == 1 and "return ModelCheckpoint(target, save_top_k=2)" in out.split(TODO)[1]


def test_a_path_beside_filename_is_1_2s_dirpath_kept() -> None:
    out = upgraded(BESIDE_FILENAME, no_todo=True, no_unmarked=True)
    assert 'ModelCheckpoint(run_root, filename="best-{epoch}", save_top_k=1)' in out


@pytest.mark.parametrize("source", [FOLDER_ONLY, TWO_POSITIONAL])
def test_an_unknown_release_gets_a_todo_and_keeps_the_call(source: str) -> None:
    out = upgraded(source)
    assert TODO in out and "filepath" not in out.split(TODO)[1].split("\n", 1)[1]


def test_the_split_call_saves_where_1_1_saved(tmp_path: Path) -> None:
    # 1.1: os.path.split(realpath("<root>/run/{epoch}")) -> folder <root>/run, pattern "{epoch}"; 1.2+ read the same
    # value as a folder named "{epoch}", which is what the call left unconverted did on 2.x.
    root = str(tmp_path)
    converted = ModelCheckpoint(**legacy_checkpoint_filepath(os.path.join(root, "run", "{epoch}")))
    assert converted.format_checkpoint_name({"epoch": 4, "step": 9}) == os.path.join(root, "run", "epoch=4.ckpt")
    unconverted = ModelCheckpoint(os.path.join(root, "run", "{epoch}"))
    assert unconverted.dirpath == os.path.join(root, "run", "{epoch}")
