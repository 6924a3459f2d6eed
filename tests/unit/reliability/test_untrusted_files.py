"""Promise 8: a checkpoint is data. A planted pickle payload is refused everywhere, and never runs.

The payload is a real one: unpickling it calls ``os.system("touch MARKER")``. Each test checks the refusal
*and* that the marker file was never created.

The in-process tests; the ones that launch processes are in ``tests/integration/reliability/test_untrusted_files.py``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from lightning_mgpu.checkpoint.io import (
    AtomicCheckpointIO,
    UnsafeCheckpointError,
    load_checkpoint_file,
    load_state_dict,
)
from lightning_mgpu.demos import ImageClassifier
from lightning_mgpu.strategies import (
    DataParallelStrategy,
    FSDP2Strategy,
    HorovodStrategy,
    ShardedStrategy,
    ZeroStrategy,
)
from lightning_mgpu.testing.parity import ParityModule
from tests.helpers.runif import RunIf
from tests.helpers.trainer import quiet_trainer


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def plant(path: Path, marker: Path, model: torch.nn.Module) -> Path:
    """A Lightning-shaped checkpoint of ``model`` whose hyper-parameters carry the payload."""
    torch.save(
        {
            "state_dict": model.state_dict(),
            "hyper_parameters": {"evil": _Payload(marker)},
            "epoch": 0,
            "global_step": 0,
            "pytorch-lightning_version": "2.6.6",
        },
        path,
    )
    return path


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PAYLOAD_RAN"


def test_load_state_dict_refuses_a_payload(tmp_path: Path, marker: Path) -> None:
    path = plant(tmp_path / "evil.ckpt", marker, ImageClassifier())
    with pytest.raises(UnsafeCheckpointError, match=r"Refused to load .*Nothing was executed.*trusted=True"):
        load_state_dict(ImageClassifier(), path)
    assert not marker.exists()


@dataclasses.dataclass
class Note:
    """A harmless object of the user's own: outside the allow-list, so refused unless trusted."""

    text: str


def test_trusted_is_explicit_and_warns(tmp_path: Path) -> None:
    path = tmp_path / "mine.ckpt"
    torch.save({"state_dict": ImageClassifier().state_dict(), "extra": Note("mine")}, path)
    with pytest.raises(UnsafeCheckpointError, match="Note"):
        load_checkpoint_file(path)
    with pytest.warns(UserWarning, match="trusted=True: unpickling can run arbitrary code"):
        assert load_checkpoint_file(path, trusted=True)["extra"].text == "mine"


def test_lightning_checkpoints_load_safely_with_the_allow_list(tmp_path: Path) -> None:
    trainer = quiet_trainer(max_steps=1, default_root_dir=tmp_path)
    model = ParityModule(global_batch=8, num_samples=8)
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "ok.ckpt")
    loaded = load_checkpoint_file(tmp_path / "ok.ckpt")  # weights_only=True, no trusted needed
    assert loaded["hyper_parameters"]["global_batch"] == 8
    load_state_dict(ParityModule(), tmp_path / "ok.ckpt")


@pytest.mark.parametrize("strategy", ["dp", "ddp", "sharded"])
def test_every_strategys_resume_refuses_a_payload(tmp_path: Path, marker: Path, strategy: str) -> None:
    path = plant(tmp_path / "evil.ckpt", marker, ParityModule())
    plugins = [AtomicCheckpointIO()] if strategy == "ddp" else []  # Lightning's ddp, as train.py runs it
    trainer = quiet_trainer(strategy=strategy, max_steps=2, plugins=plugins, use_distributed_sampler=False)
    with pytest.raises(UnsafeCheckpointError):
        trainer.fit(ParityModule(global_batch=8, num_samples=16), ckpt_path=path)
    assert not marker.exists()


@RunIf(horovod=True, fairscale=True)
def test_bundle_strategies_default_to_the_safe_atomic_io(tmp_path: Path, marker: Path) -> None:
    path = plant(tmp_path / "evil.ckpt", marker, ParityModule())
    for strategy in (DataParallelStrategy(), HorovodStrategy(), ShardedStrategy(), ZeroStrategy(), FSDP2Strategy()):
        assert isinstance(strategy.checkpoint_io, AtomicCheckpointIO), type(strategy).__name__
        # Lightning's resume calls strategy.load_checkpoint -> checkpoint_io.load_checkpoint.
        with pytest.raises(UnsafeCheckpointError):
            strategy.checkpoint_io.load_checkpoint(path)
    assert not marker.exists()
