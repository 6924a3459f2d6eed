"""``lightning_mgpu.checkpoint.io.load_state_dict``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from lightning_mgpu.checkpoint.io import (
    CheckpointKeyMismatchError,
    extract_state_dict,
    load_state_dict,
    strip_prefix,
)
from lightning_mgpu.demos import ImageClassifier


def _assert_same(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.fixture
def trained() -> ImageClassifier:
    torch.manual_seed(1)
    model = ImageClassifier(width=8)
    with torch.no_grad():  # move BN buffers off their defaults so they are checked too
        model(torch.randn(4, 1, 8, 8))
    return model


@pytest.mark.parametrize("prefix", ["", "module.", "module.module."])
def test_round_trip_with_and_without_prefix(trained: ImageClassifier, prefix: str, tmp_path: Path) -> None:
    state = {prefix + k: v for k, v in trained.state_dict().items()}
    path = tmp_path / "raw.pt"
    torch.save(state, path)
    fresh = ImageClassifier(width=8)
    assert load_state_dict(fresh, path) is fresh
    _assert_same(fresh, trained)


def test_loads_into_a_wrapped_model(trained: ImageClassifier) -> None:
    wrapped = nn.DataParallel(ImageClassifier(width=8))  # keys start with module.
    load_state_dict(wrapped, trained.state_dict())
    _assert_same(wrapped.module, trained)


def test_lightning_checkpoint_layout_and_cpu_placement(trained: ImageClassifier, tmp_path: Path) -> None:
    ckpt = {
        "epoch": 3,
        "state_dict": {"module." + k: v for k, v in trained.state_dict().items()},
        "optimizer_states": [],
    }
    path = tmp_path / "model.ckpt"
    torch.save(ckpt, path)
    fresh = ImageClassifier(width=8)
    load_state_dict(fresh, path)
    _assert_same(fresh, trained)
    assert all(p.device.type == "cpu" for p in fresh.state_dict().values())
    assert extract_state_dict(ckpt).keys() == ckpt["state_dict"].keys()


def test_map_location_is_honoured(trained: ImageClassifier) -> None:
    captured = {}

    class Spy(ImageClassifier):
        def load_state_dict(self, state_dict, strict=True, assign=False):  # type: ignore[override]
            captured.update({k: v.dtype for k, v in state_dict.items()})
            return super().load_state_dict(state_dict, strict=strict)

    state = {k: v.to(torch.float64) if v.is_floating_point() else v for k, v in trained.state_dict().items()}
    load_state_dict(Spy(width=8), state, map_location="cpu")
    assert captured and all(str(t).startswith("torch.") for t in captured.values())


def test_mismatched_keys_list_missing_and_unexpected(trained: ImageClassifier) -> None:
    state = trained.state_dict()
    state.pop("head.3.bias")
    state["head.9.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointKeyMismatchError) as err:
        load_state_dict(ImageClassifier(width=8), state)
    msg = str(err.value)
    assert "1 missing key(s) [head.3.bias]" in msg and "1 unexpected key(s) [head.9.weight]" in msg
    assert "strict=False" in msg
    fresh = ImageClassifier(width=8)
    load_state_dict(fresh, state, strict=False)
    assert torch.equal(fresh.head[1].weight, trained.head[1].weight)


def test_missing_file_and_non_checkpoint_are_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_state_dict(ImageClassifier(), tmp_path / "nope.ckpt")
    with pytest.raises(ValueError, match="Could not find model weights"):
        load_state_dict(ImageClassifier(), {"epoch": 1, "lr": 0.1})


def test_strip_prefix_is_repeated() -> None:
    assert list(strip_prefix({"module.module.a": 1, "b": 2})) == ["a", "b"]
