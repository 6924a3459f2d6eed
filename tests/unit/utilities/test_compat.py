"""``utilities/_compat.py``: version facts and the refusals that name a version."""

from __future__ import annotations

import pytest
import torch

from lightning_mgpu.utilities._compat import FSDP2_ON_CPU_SINCE, UnsupportedTorchError, check_fsdp2_device


def test_fsdp2_on_cpu_with_a_torch_that_cannot_run_it_names_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cpu, "Stream", type("Stream", (), {"record_event": lambda self: None}))  # torch >= 2.7
    check_fsdp2_device("cpu")
    monkeypatch.setattr(torch.cpu, "Stream", type("Stream", (), {}))  # torch 2.6's CPU stream: no record_event
    with pytest.raises(
        UnsupportedTorchError, match=rf"needs torch {FSDP2_ON_CPU_SINCE} or newer.*ShardedStrategy\(backend='torch'\)"
    ):
        check_fsdp2_device("cpu")
    check_fsdp2_device("cuda")  # CUDA streams record events on every supported torch
