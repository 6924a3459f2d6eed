"""``physical_device_ids``: torch's CUDA indices as the machine's GPUs, and what ``info`` shows of them."""

from __future__ import annotations

import pytest

from lightning_mgpu.cli import physical_note
from lightning_mgpu.utilities.devices import physical_device_ids


def test_physical_device_ids_follow_cuda_visible_devices() -> None:
    assert physical_device_ids([2, 3], visible="4,5,6,7") == ["6", "7"]
    assert physical_device_ids([2, 3], visible="") == ["2", "3"]
    assert physical_device_ids([0], visible="GPU-1a2b, GPU-3c4d") == ["GPU-1a2b"]
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES='2,3'.*devices=2"):
        physical_device_ids([2, 3], visible="2,3")


def test_info_names_the_physical_gpu_only_where_it_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert physical_note(2, visible="4,5,6,7") == " (physical GPU 6)"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert physical_note(1) == "" and physical_note(1, visible="0,1") == ""
    assert physical_note(0, visible="GPU-1a2b") == " (GPU-1a2b)"
    assert physical_note(3, visible="4") == ""  # an index torch would not have listed: nothing guessed
