"""``python -m lightning_mgpu build-horovod``: the patch, the cache key and the fast path.

The full build (minutes) runs on every fresh CI machine through ``scripts/build_horovod.sh``, which calls
this same command; these tests check its parts in seconds.

The tests that launch processes; the in-process ones are in ``tests/unit/strategies/horovod/test_build.py``.
"""

from __future__ import annotations

import sys

from lightning_mgpu.tools import build_horovod as build
from tests.helpers.launch import run_python
from tests.helpers.runif import RunIf


def test_cache_key_names_horovod_torch_and_python() -> None:
    import torch

    key = build.cache_key(sys.executable)
    assert key.startswith(
        f"hvd{build.HOROVOD_VERSION}-p{build.PATCH_LEVEL}-torch{torch.__version__.replace('+', '_')}-cp3"
    )


@RunIf(horovod=True)
def test_command_is_a_no_op_when_horovod_is_installed() -> None:
    out = run_python(["-m", "lightning_mgpu", "build-horovod"], timeout=180)
    assert "already installed with Gloo" in out.stdout + out.stderr
