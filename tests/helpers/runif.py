"""``RunIf``: one skip helper for what a test needs (GPUs, optional packages, Chromium).

Modelled on Lightning's own ``RunIf``. A missing GPU always skips. A missing optional package skips on a
developer machine, but on CI (``CI`` set, as ``.ci/run`` runs) the test runs and fails: CI installs every
extra, so a skip there would hide a broken set-up.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from lightning_mgpu.utilities.imports import is_available

_INSTALL = {
    "horovod": "bash scripts/build_horovod.sh (or python -m lightning_mgpu build-horovod)",
    "fairscale": "pip install -e '.[sharded]'",
    "ray": "pip install -e '.[ray]'",
    "neptune": "pip install -e '.[neptune]'",
    "pynvml": "pip install -e '.[gpu]'",
    "plotly": "pip install -e '.[dashboard]'",
    "tensorboard": "pip install -e '.[dashboard]'",
}


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Requirements:
    """What ``RunIf`` returns: a decorator applying every mark, and the marks as a list.

    Use ``@RunIf(...)`` on a test, ``pytestmark = RunIf(...).marks`` for a module, and
    ``pytest.param(..., marks=RunIf(...).marks)`` for one parameter.
    """

    def __init__(self, marks: list[pytest.MarkDecorator]) -> None:
        self.marks = marks

    def __call__(self, obj: object) -> object:
        for mark in self.marks:
            obj = mark(obj)
        return obj


def RunIf(  # noqa: N802  (reads like a decorator, as Lightning's does)
    *,
    min_cuda_gpus: int = 0,
    horovod: bool = False,
    fairscale: bool = False,
    ray: bool = False,
    neptune: bool = False,
    pynvml: bool = False,
    plotly: bool = False,
    tensorboard: bool = False,
    chromium: bool = False,
) -> Requirements:
    """Skip marks for everything missing among what is asked for, plus the ``gpu``/``horovod``/``ray`` markers.

    Example::

        @RunIf(min_cuda_gpus=2, fairscale=True)
        def test_fp16_on_two_gpus(): ...
    """
    reasons: list[str] = []
    marks: list[pytest.MarkDecorator] = []
    if min_cuda_gpus:
        marks.append(pytest.mark.gpu)
        if torch.cuda.device_count() < min_cuda_gpus:
            reasons.append(f"needs {min_cuda_gpus} CUDA GPU(s), found {torch.cuda.device_count()}")
    wanted = {
        "horovod": horovod,
        "fairscale": fairscale,
        "ray": ray,
        "neptune": neptune,
        "pynvml": pynvml,
        "plotly": plotly,
        "tensorboard": tensorboard,
    }
    on_ci = bool(os.environ.get("CI"))
    for package, needed in wanted.items():
        if not needed:
            continue
        if package in ("horovod", "ray"):
            marks.append(getattr(pytest.mark, package))
        if not is_available(package) and not on_ci:
            reasons.append(f"needs {package} ({_INSTALL[package]})")
    if chromium and chromium_path() is None and not on_ci:
        reasons.append("needs Debian's chromium (bash scripts/install_system_deps.sh)")
    if reasons:
        marks.append(pytest.mark.skip(reason="; ".join(reasons)))
    return Requirements(marks)


def require_or_skip(package: str) -> object:
    """``pytest.importorskip`` for a developer machine; on CI a plain import, so a missing package fails."""
    if os.environ.get("CI"):
        import importlib

        return importlib.import_module(package)
    return pytest.importorskip(package)
