"""``python -m lightning_mgpu build-horovod``: the patch, the cache key and the fast path.

The full build (minutes) runs on every fresh CI machine through ``scripts/build_horovod.sh``, which calls
this same command; these tests check its parts in seconds.

The tests that launch processes; the in-process ones are in ``tests/unit/strategies/horovod/test_build.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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


def test_the_cuda_toolkit_is_where_nvcc_says_it_runs_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``nvcc`` on the PATH may be a wrapper script (``/usr/local/bin/nvcc`` running the toolkit's own): its dry run
    names the real ``bin`` folder, whose parent holds the headers and libraries CMake needs."""
    from lightning_mgpu.tools.build_horovod import cuda_toolkit_home

    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\necho '#$ _NVVM_BRANCH_=nvvm' >&2\necho '#$ _HERE_={toolkit}/bin' >&2\n")
    wrapper.chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert cuda_toolkit_home(str(wrapper)) == toolkit
    (tmp_path / "home" / "include").mkdir(parents=True)
    (tmp_path / "home" / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))  # a toolkit the user names wins
    assert cuda_toolkit_home(str(wrapper)) == tmp_path / "home"
