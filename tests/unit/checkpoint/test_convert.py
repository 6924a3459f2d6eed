"""``lightning-mgpu convert``: a sharded folder <-> one .ckpt, and -> .safetensors, in one process; bad input
refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from lightning_mgpu.checkpoint.io import AtomicCheckpointIO, read_checkpoint
from lightning_mgpu.checkpoint.sharded import is_sharded_checkpoint
from lightning_mgpu.cli import main as cli_main

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch.distributed")


@pytest.fixture
def full_file(tmp_path: Path) -> Path:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    path = tmp_path / "epoch03.ckpt"
    AtomicCheckpointIO().save_checkpoint(
        {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "global_step": 3, "epoch": 1},
        path,
    )
    return path


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_file_to_folder_to_file_is_lossless(full_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder, back = tmp_path / "sharded.ckpt", tmp_path / "back.ckpt"
    assert cli_main(["convert", str(full_file), str(folder)]) == 0
    assert (
        is_sharded_checkpoint(folder)
        and "a sharded checkpoint folder (4 model tensors, 1 optimizer state(s)" in capsys.readouterr().err
    )
    assert cli_main(["convert", str(folder), str(back)]) == 0
    before, after = read_checkpoint(full_file), read_checkpoint(back)
    assert back.is_file() and _equal(before["state_dict"], after["state_dict"]) and after["global_step"] == 3
    a, b = before["optimizer_states"][0], after["optimizer_states"][0]
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    assert all(_equal(a["state"][i], b["state"][i]) for i in a["state"])


def test_safetensors_holds_the_weights_alone(full_file: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    folder = tmp_path / "sharded.ckpt"
    assert cli_main(["convert", str(full_file), str(folder)]) == 0
    for src in (full_file, folder):
        out = tmp_path / f"{src.stem}.safetensors"
        assert cli_main(["convert", str(src), str(out)]) == 0
        assert _equal(load_file(out), read_checkpoint(full_file)["state_dict"])


def test_bad_input_is_refused_and_nothing_is_overwritten(
    full_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    existing = tmp_path / "keep.ckpt"
    existing.write_bytes(b"mine")
    assert cli_main(["convert", str(full_file), str(existing)]) == 2
    assert "already exists" in capsys.readouterr().err and existing.read_bytes() == b"mine"
    assert cli_main(["convert", str(tmp_path / "nope.ckpt"), str(tmp_path / "x")]) == 2
    assert "nope.ckpt does not exist: pass a checkpoint file or a sharded checkpoint folder" in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    assert cli_main(["convert", str(tmp_path / "plain"), str(tmp_path / "y")]) == 2
    assert "is a folder but not a sharded checkpoint folder" in capsys.readouterr().err
    for name, content in (("empty.ckpt", b""), ("notes.ckpt", b"hello")):
        (tmp_path / name).write_bytes(content)
        assert cli_main(["convert", str(tmp_path / name), str(tmp_path / f"{name}.out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "_use_new_zipfile_serialization" not in err
        assert ("is empty (0 bytes)" if not content else "is not a torch checkpoint") in err
    assert cli_main(["convert", str(full_file), str(tmp_path / "x.ckpt"), "--to", "ckpt"]) == 2
    assert "already one file; pass --to with the other format" in capsys.readouterr().err
    assert not (tmp_path / "x.ckpt").exists()
