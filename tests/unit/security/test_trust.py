"""The one check at every checkpoint load: on a torch whose ``weights_only`` unpickler has GHSA-63cw-57p8-fm3p
(< 2.10), a file or sharded folder is refused unless trusted, before any of it is read.

The torch version is set through ``advisories.installed_version``, the one lookup the check reads. The planted file is
a real payload: unpickling it calls ``os.system("touch MARKER")``; every refusal checks the marker never appeared.
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lightning_mgpu.checkpoint.convert import main as convert_main
from lightning_mgpu.checkpoint.io import (
    AtomicCheckpointIO,
    UnsafeCheckpointError,
    check_checkpoint_matches,
    load_checkpoint_file,
    load_state_dict,
    read_checkpoint,
)
from lightning_mgpu.checkpoint.sharded import temporary_folder, write_sharded_checkpoint
from lightning_mgpu.security import advisories
from lightning_mgpu.security.trust import check_untrusted_load

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch.distributed")

OLD_TORCH, FIXED_TORCH = "2.9.1+cpu", "2.10.0"


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))


def _checkpoint(extra: dict[str, Any]) -> dict[str, Any]:
    return {"state_dict": _model().state_dict(), "epoch": 0, "global_step": 0, **extra}


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PAYLOAD_RAN"


@pytest.fixture
def planted(tmp_path: Path, marker: Path) -> Path:
    path = tmp_path / "evil.ckpt"
    torch.save(_checkpoint({"hyper_parameters": {"evil": _Payload(marker)}}), path)
    return path


@pytest.fixture
def planted_folder(tmp_path: Path, marker: Path) -> Path:
    """A sharded folder whose meta.pt (rank 0's part) carries the payload."""
    path = tmp_path / "evil-sharded.ckpt"
    checkpoint = _checkpoint({"hyper_parameters": {"evil": _Payload(marker)}})
    write_sharded_checkpoint(checkpoint, path, temporary_folder(path), coordinator=True, no_dist=True)
    return path


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    path = tmp_path / "clean.ckpt"
    torch.save(_checkpoint({}), path)
    return path


def _torch_at(monkeypatch: pytest.MonkeyPatch, torch_version: str) -> None:
    real = advisories.installed_version
    monkeypatch.setattr(
        advisories, "installed_version", lambda package: torch_version if package == "torch" else real(package)
    )


def _convert(src: Path, out: Path, trusted: bool = False) -> int:
    return convert_main(argparse.Namespace(src=src, out=out, to="auto", trusted=trusted))


#: every way the bundle reads a checkpoint it did not write in this run
LOADS: dict[str, Callable[[Path], Any]] = {
    "load_checkpoint_file": load_checkpoint_file,
    "read_checkpoint": read_checkpoint,
    "load_state_dict": lambda path: load_state_dict(_model(), path),
    "check_checkpoint_matches (--ckpt-path)": lambda path: check_checkpoint_matches(_model(), path),
    "AtomicCheckpointIO.load_checkpoint (fit(ckpt_path=...))": lambda path: AtomicCheckpointIO().load_checkpoint(path),
}


@pytest.mark.parametrize(
    ("source", "load"),
    [
        pytest.param(source, load, id=f"{source}-{name}")
        for source in ("planted", "planted_folder")
        for name, load in LOADS.items()
        if not (source == "planted_folder" and name == "load_checkpoint_file")  # a file's reader; a folder is refused
    ],
)
def test_old_torch_refuses_before_reading(
    source: str, load: Callable[[Path], Any], marker: Path, request: pytest.FixtureRequest, monkeypatch
) -> None:
    path = request.getfixturevalue(source)
    _torch_at(monkeypatch, OLD_TORCH)
    with pytest.raises(UnsafeCheckpointError) as refused:
        load(path)
    message = str(refused.value)
    assert "\n" not in message
    assert "GHSA-63cw-57p8-fm3p" in message and "Upgrade torch to 2.10.0 or newer" in message, message
    assert "trusted=True" in message and "--trust-checkpoint" in message
    assert not marker.exists()


@pytest.mark.parametrize("source", ["planted", "planted_folder"])
def test_fixed_torch_refuses_the_payload_by_the_allow_list(
    source: str, marker: Path, request: pytest.FixtureRequest, monkeypatch
) -> None:
    path = request.getfixturevalue(source)
    _torch_at(monkeypatch, FIXED_TORCH)
    with pytest.raises(UnsafeCheckpointError) as refused:
        read_checkpoint(path)
    assert "GHSA-63cw-57p8-fm3p" not in str(refused.value) and "not plain data" in str(refused.value)
    assert not marker.exists()


def test_a_clean_file_loads_on_fixed_torch_and_needs_trust_on_old(clean: Path, monkeypatch) -> None:
    _torch_at(monkeypatch, FIXED_TORCH)
    assert set(read_checkpoint(clean)["state_dict"]) == set(_model().state_dict())
    _torch_at(monkeypatch, OLD_TORCH)
    with pytest.raises(UnsafeCheckpointError, match="GHSA-63cw-57p8-fm3p"):
        read_checkpoint(clean)
    with pytest.warns(UserWarning, match="trusted=True"):
        assert read_checkpoint(clean, trusted=True)["global_step"] == 0
    with pytest.warns(UserWarning, match="trusted=True"):
        assert AtomicCheckpointIO(trusted=True).load_checkpoint(clean)["epoch"] == 0


def test_convert_refuses_on_old_torch_and_trust_checkpoint_lets_it_through(
    clean: Path, planted: Path, marker: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    _torch_at(monkeypatch, OLD_TORCH)
    assert _convert(planted, tmp_path / "out-evil") == 2
    assert _convert(clean, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("GHSA-63cw-57p8-fm3p") == 2 and len(err.strip().splitlines()) == 2
    assert not marker.exists() and not (tmp_path / "out").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the trusted load's own warning
        assert _convert(clean, tmp_path / "out", trusted=True) == 0
    assert (tmp_path / "out").is_dir()


def test_the_command_line_spells_it_trust_checkpoint() -> None:
    from lightning_mgpu.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["convert", "a", "b", "--trust-checkpoint"]).trusted
    assert parser.parse_args(["convert", "a", "b", "--trusted"]).trusted  # the earlier spelling
    assert not parser.parse_args(["convert", "a", "b"]).trusted


@pytest.mark.parametrize(
    ("torch_version", "refused"),
    [("2.9.1", True), ("2.9.1+cu128", True), ("2.6.0", True), ("2.10.0", False), ("2.13.0+cpu", False), (None, False)],
)
def test_the_version_line(torch_version: str | None, refused: bool, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(advisories, "installed_version", lambda package: torch_version)
    if refused:
        with pytest.raises(UnsafeCheckpointError):
            check_untrusted_load(tmp_path, trusted=False)
    else:
        check_untrusted_load(tmp_path, trusted=False)
    check_untrusted_load(tmp_path, trusted=True)  # trust always passes
