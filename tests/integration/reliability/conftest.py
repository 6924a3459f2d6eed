"""Fixtures that make real faults: a small disk that fills, a read-only folder.

Both need mount(2) (root, as on CI). Elsewhere the tests that use them skip, saying why; on CI (``CI`` set)
they fail instead, since CI must take the real path.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(args: list[str]) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        message = f"mount {' '.join(args)} failed: {proc.stderr.strip()} (needs root)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: the second ~3 MB checkpoint saved into it hits ENOSPC."""
    mount = tmp_path / "small_disk"
    mount.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)])
    try:
        yield mount
    finally:
        _umount(mount)


@pytest.fixture
def readonly_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder bind-mounted read-only (root ignores permission bits, not a read-only mount)."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    (folder / "last.ckpt").write_bytes(b"previous")
    _mount(["--bind", "-o", "ro", str(folder), str(folder)])
    try:
        yield folder
    finally:
        _umount(folder)
