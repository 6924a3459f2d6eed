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
        UnsupportedTorchError, match=rf"needs torch {FSDP2_ON_CPU_SINCE} or newer.*strategy='sharded_zero'"
    ):
        check_fsdp2_device("cpu")
    check_fsdp2_device("cuda")  # CUDA streams record events on every supported torch


def test_both_extras_exclude_the_withdrawn_malicious_releases() -> None:
    """Lightning 2.6.2 and 2.6.3 were malicious uploads (GHSA-w37p-236h-pfx3): no extra may admit them."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from pathlib import Path

    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for extra in ("lightning", "pytorch-lightning"):
        (requirement,) = (Requirement(r) for r in extras[extra])
        assert not requirement.specifier.contains("2.6.2") and not requirement.specifier.contains("2.6.3"), extra
        assert requirement.specifier.contains("2.6.6") and requirement.specifier.contains("2.5.1"), extra
