"""The unit tier starts no process: a test that does belongs in ``tests/integration/``.

Each unit test runs with process creation refused (``subprocess``, ``os.fork``/``posix_spawn``, ``multiprocessing``),
so the tier stays the fast loop it is meant to be: a launch costs seconds of imports, and a test that slips one in
fails here at once, naming the folder to move it to.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


class ProcessLaunchInUnitTest(RuntimeError):
    """A unit test started a process."""


@pytest.fixture(autouse=True)
def _no_process_launch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise ProcessLaunchInUnitTest(
                f"{request.node.nodeid} started a process ({what}); unit tests run in-process. "
                "Move the test to tests/integration/ (the same sub-folder), or test the logic without the launch."
            )

        return refused

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess"))
    monkeypatch.setattr(os, "fork", refuse("os.fork"))
    monkeypatch.setattr(os, "posix_spawn", refuse("os.posix_spawn"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse("multiprocessing"))
    yield
