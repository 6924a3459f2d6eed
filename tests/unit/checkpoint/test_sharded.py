"""Sharded checkpoint folders in one process: the layout, the round trip to a full checkpoint, the atomic swap.

The multi-rank saves and the resharding (2 -> 1 -> 2, 2 -> 4 ranks) are in
``tests/integration/strategies/fsdp2/test_fsdp2.py``; a SIGKILL during folder saves in
``tests/integration/reliability/test_atomic_checkpoints.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from lightning_mgpu.checkpoint import sharded as sharded_checkpoint
from lightning_mgpu.checkpoint.io import (
    AtomicCheckpointIO,
    CheckpointKeyMismatchError,
    CheckpointReadError,
    check_checkpoint_matches,
    read_checkpoint,
)
from lightning_mgpu.checkpoint.sharded import (
    BackgroundSaves,
    check_saved_optimizer_count,
    is_sharded_checkpoint,
    load_planner,
    match_saved_group_options,
    saved_entries,
    sharded_model_keys,
    split_checkpoint,
    temporary_folder,
    write_sharded_checkpoint,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch.distributed")


def _checkpoint(version: float = 1.0) -> dict:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    torch.nn.init.constant_(model[0].weight, version)  # tells the saves apart
    return {
        "state_dict": model.state_dict(),
        "optimizer_states": [optimizer.state_dict()],
        "global_step": 7,
        "loops": {"fit_loop": {"epoch": 2}},
        "rng": torch.arange(4),
        "hyper_parameters": {"lr": 0.1},
    }


def _save(checkpoint: dict, path: Path) -> None:
    write_sharded_checkpoint(checkpoint, path, temporary_folder(path), coordinator=True, no_dist=True)


def _assert_same(a: object, b: object, where: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, list(a), list(b) if isinstance(b, dict) else b)
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b, (where, a, b)


def test_a_folder_reads_back_as_the_full_checkpoint_it_stands_for(tmp_path: Path) -> None:
    checkpoint = _checkpoint()
    path = tmp_path / "last.ckpt"
    _save(checkpoint, path)
    assert is_sharded_checkpoint(path) and {p.name for p in path.iterdir()} == {".metadata", "__0_0.distcp", "meta.pt"}
    back = read_checkpoint(path)
    # The same keys, integer optimizer ids, param groups and tensors, bit for bit; meta.pt holds the rest.
    _assert_same(checkpoint, back)
    assert list(back["optimizer_states"][0]["state"]) == [0, 1, 2, 3]
    assert "state_dict" not in torch.load(path / "meta.pt", weights_only=True)
    # Lightning's strategies read it through the bundle's checkpoint IO; the key check reads only the metadata.
    _assert_same(AtomicCheckpointIO().load_checkpoint(path)["state_dict"], checkpoint["state_dict"])
    assert sharded_model_keys(path) == set(checkpoint["state_dict"])


def test_the_key_check_refuses_a_folder_of_another_model(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    _save(_checkpoint(), path)
    check_checkpoint_matches(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)), path)
    with pytest.raises(CheckpointKeyMismatchError, match="2 missing key"):
        check_checkpoint_matches(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)), path)


def test_a_folder_of_another_number_of_optimizers_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    _save(_checkpoint(), path)
    entries = saved_entries(path)  # the metadata, read once for every check and optimizer of a load
    assert {where[:2] for where, _ in entries if where[0] == "optimizer_states"} == {("optimizer_states", 0)}
    check_saved_optimizer_count(path, entries, 1)
    with pytest.raises(
        ValueError,
        match=r"holds the state of 1 optimizer\(s\), this model has 2\. Resume it with the configure_optimizers",
    ):
        check_saved_optimizer_count(path, entries, 2)
    assert is_sharded_checkpoint(path)  # refused before anything was read into the model, and left whole


def test_the_loaded_param_groups_are_the_saved_ones_whatever_the_optimizer_holds_now(tmp_path: Path) -> None:
    """As torch's Optimizer.load_state_dict: Lightning's LearningRateFinder saves, gives the groups ``initial_lr``
    for its search, then loads the folder back (torch.distributed.checkpoint alone refuses the key the folder
    lacks)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    saved = _checkpoint()
    saved["optimizer_states"][0]["param_groups"][0]["foreach"] = False
    path = tmp_path / "last.ckpt"
    _save(saved, path)
    now = _checkpoint(version=2.0)
    group = now["optimizer_states"][0]["param_groups"][0]
    group.update(lr=0.5, initial_lr=0.5)  # an option the folder does not hold
    del group["foreach"]  # and one it holds that the optimizer has no longer
    target, _ = split_checkpoint(now)
    with pytest.raises(CheckpointException, match="initial_lr"):
        dcp.load(
            split_checkpoint(now)[0], storage_reader=sharded_checkpoint.folder_reader(path), planner=load_planner()
        )

    match_saved_group_options(saved_entries(path), target)
    dcp.load(target, storage_reader=sharded_checkpoint.folder_reader(path), planner=load_planner())
    loaded = target["optimizer_states"][0]["param_groups"][0]
    assert loaded.keys() == saved["optimizer_states"][0]["param_groups"][0].keys()
    assert loaded["lr"] == saved["optimizer_states"][0]["param_groups"][0]["lr"] and loaded["foreach"] is False
    assert torch.equal(target["state_dict"]["0.weight"], saved["state_dict"]["0.weight"])


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "rename-aside"])
@pytest.mark.parametrize("previous", ["file", "folder"])
def test_a_save_replaces_what_was_there_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool, previous: str
) -> None:
    if not exchange:  # a filesystem without RENAME_EXCHANGE
        monkeypatch.setattr(sharded_checkpoint, "_exchange", lambda a, b: False)
    path = tmp_path / "last.ckpt"
    if previous == "file":
        AtomicCheckpointIO().save_checkpoint(_checkpoint(1.0), path)
    else:
        _save(_checkpoint(1.0), path)
    _save(_checkpoint(2.0), path)
    assert torch.equal(read_checkpoint(path)["state_dict"]["0.weight"], torch.full((4, 3), 2.0))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_save_that_fails_midway_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.ckpt"
    _save(_checkpoint(1.0), path)

    def dies_after_the_shards(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sharded_checkpoint, "fsync_dir", dies_after_the_shards)  # after every shard and meta.pt
    with pytest.raises(OSError, match="No space"):
        _save(_checkpoint(2.0), path)
    assert torch.equal(read_checkpoint(path)["state_dict"]["0.weight"], torch.full((4, 3), 1.0))
    stale = [p for p in tmp_path.iterdir() if p.name != "last.ckpt"]
    assert len(stale) == 1 and stale[0].name.endswith(".tmp-dir")
    monkeypatch.undo()
    _save(_checkpoint(3.0), path)  # the next save removes the killed one's temporary folder
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_folder_cut_short_is_named_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    _save(_checkpoint(), path)
    (path / "meta.pt").unlink()
    with pytest.raises(CheckpointReadError, match="is a folder, not a sharded checkpoint"):
        read_checkpoint(path)
    _save(_checkpoint(), path)
    next(path.glob("*.distcp")).write_bytes(b"")
    with pytest.raises(CheckpointReadError, match="a shard is missing or cut short"):
        read_checkpoint(path)


def test_background_saves_land_one_at_a_time_and_a_failure_surfaces_at_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed as dist

    from lightning_mgpu.utilities.process_group import destroy_all_groups

    def weight(path: Path) -> float:
        return float(read_checkpoint(path)["state_dict"]["0.weight"][0, 0])

    def dies_after_the_shards(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        saves = BackgroundSaves()
        path = tmp_path / "ckpts" / "last.ckpt"
        saves.start(_checkpoint(1.0), path, temporary_folder(path), coordinator=True)
        group = saves.group
        assert group is not None and group is not dist.group.WORLD  # the saves' collectives stay off training's group
        saves.start(_checkpoint(2.0), path, temporary_folder(path), coordinator=True)  # after the first has landed
        assert saves.group is group
        saves.wait()
        assert weight(path) == 2.0 and [p.name for p in path.parent.iterdir()] == ["last.ckpt"]

        monkeypatch.setattr(sharded_checkpoint, "fsync_dir", dies_after_the_shards)
        saves.start(_checkpoint(3.0), path, temporary_folder(path), coordinator=True)
        with pytest.raises(OSError, match="No space"):
            saves.wait()  # the background failure reaches whoever waits
        saves.wait()  # and only once
        assert weight(path) == 2.0

        saves.start(_checkpoint(4.0), path, temporary_folder(path), coordinator=True)
        pending = saves._pending
        saves.abandon()
        saves.wait()  # a failed run does not wait for (or raise) the save it abandoned
        assert pending is not None
        with pytest.raises(OSError, match="No space"):
            pending.result(timeout=60)
        assert weight(path) == 2.0  # the previous checkpoint stays in place
    finally:
        destroy_all_groups(release=True)


class _OpensMarker:
    """Unpickling it creates the marker file (a real payload that starts no process)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


def _clean_folder(tmp_path: Path, extra: dict | None = None) -> Path:
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    state = {**model.state_dict(), **(extra or {})}
    path = tmp_path / "folder.ckpt"
    checkpoint = {"state_dict": state, "optimizer_states": [optimizer.state_dict()], "global_step": 1}
    sharded_checkpoint.write_sharded_checkpoint(
        checkpoint, path, temporary_folder(path), coordinator=True, no_dist=True
    )
    return path


@pytest.mark.filterwarnings("ignore::UserWarning:torch.distributed")
def test_a_folder_is_read_as_data_and_its_optimizer_state_survives(tmp_path: Path) -> None:
    loaded = read_checkpoint(_clean_folder(tmp_path))
    (group,) = loaded["optimizer_states"][0]["param_groups"]
    assert group["betas"] == (0.9, 0.999) and group["lr"] == 1e-3 and loaded["global_step"] == 1


@pytest.mark.filterwarnings("ignore::UserWarning:torch.distributed")
def test_a_crafted_metadata_is_refused_where_torchs_own_reader_runs_it(tmp_path: Path, monkeypatch) -> None:
    from torch.distributed.checkpoint import FileSystemReader

    from lightning_mgpu.security import advisories
    from lightning_mgpu.security.trust import UnsafeCheckpointError

    monkeypatch.setattr(advisories, "installed_version", lambda package: "2.13.0")  # past GHSA-63cw-57p8-fm3p
    path = _clean_folder(tmp_path)
    marker = tmp_path / "PAYLOAD_RAN"
    (path / ".metadata").write_bytes(__import__("pickle").dumps(_OpensMarker(marker)))
    for read in (read_checkpoint, lambda p: check_checkpoint_matches(nn.Linear(3, 2), p), saved_entries):
        with pytest.raises(UnsafeCheckpointError, match=r"its \.metadata names io\.open.*Nothing was executed"):
            read(path)
    assert not marker.exists()
    FileSystemReader(str(path)).read_metadata()  # torch's reader unpickles it: the payload is real
    assert marker.exists()


@pytest.mark.filterwarnings("ignore::UserWarning:torch.distributed")
def test_a_crafted_entry_of_the_shards_is_refused(tmp_path: Path, monkeypatch) -> None:
    from lightning_mgpu.security import advisories
    from lightning_mgpu.security.trust import UnsafeCheckpointError

    monkeypatch.setattr(advisories, "installed_version", lambda package: "2.13.0")
    marker = tmp_path / "PAYLOAD_RAN"
    path = _clean_folder(tmp_path, extra={"evil": _OpensMarker(marker)})  # DCP stores a non-tensor as bytes
    assert not marker.exists()
    with pytest.raises(UnsafeCheckpointError, match=r"an entry of its shards is not plain data .*io\.open"):
        read_checkpoint(path)
    assert not marker.exists()
