"""FSDP2's choice of full-checkpoint gather (the launched checks are in tests/integration/strategies/sharded/test_fsdp2.py)."""

from __future__ import annotations

import pytest
from torch import nn

from lightning_mgpu.strategies.sharded.fsdp2 import GATHER_ENV, gathers_by_hand


def test_the_environment_forces_or_forbids_the_full_tensor_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    module = nn.Linear(2, 2)
    monkeypatch.delenv(GATHER_ENV, raising=False)
    assert not gathers_by_hand(module)  # CPU parameters, no process group: DCP's gather
    monkeypatch.setenv(GATHER_ENV, "1")
    assert gathers_by_hand(module)
    monkeypatch.setenv(GATHER_ENV, "0")
    assert not gathers_by_hand(module)
