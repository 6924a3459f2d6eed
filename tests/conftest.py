"""Shared pytest configuration.

Unit tests run in-process; multi-process integration tests are marked ``integration`` and
launch real gloo/horovod/ray workers on this CPU machine.
"""

from __future__ import annotations

import os

import pytest

# Keep every test off the network and quiet.
os.environ.setdefault("NEPTUNE_MODE", "debug")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
