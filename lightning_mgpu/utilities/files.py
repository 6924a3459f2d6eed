"""Writing a file so that a kill at any moment leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Callable


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable across a power loss (POSIX; harmless to skip where unsupported)."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temporary_name(path: Path) -> Path:
    """``.NAME.PID.tmp`` beside ``path``: same filesystem, so the final rename is atomic."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None], tmp: Path | None = None) -> None:
    """``write(file)`` into a temporary file beside ``path``, fsync it, rename it over ``path``, fsync the folder.

    The temporary file is removed if anything fails; ``path`` is then unchanged. Errors propagate as raised.

    Example::

        atomic_write("out/summary.json", lambda f: f.write(json.dumps(summary).encode()))
    """
    path = Path(path)
    tmp = tmp or temporary_name(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(path.parent)
