"""Writing a file so that a kill at any moment leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable across a power loss (POSIX; harmless to skip where unsupported)."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temporary_name(path: Path, pid: int | None = None) -> Path:
    """``.NAME.PID.tmp`` beside ``path``: same filesystem, so the final rename is atomic."""
    return path.with_name(f".{path.name}.{os.getpid() if pid is None else pid}.tmp")


def remove_stale_temporaries(path: Path) -> None:
    """Delete the temporary files of ``path`` that writers killed mid-write left behind (their process is gone)."""
    prefix, suffix = f".{path.name}.", ".tmp"
    for tmp in path.parent.glob(f"{glob.escape(prefix)}*{suffix}"):
        pid = tmp.name[len(prefix) : -len(suffix)]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None], tmp: Path | None = None) -> None:
    """``write(file)`` into a temporary file beside ``path``, fsync it, rename it over ``path``, fsync the folder.

    The temporary file is removed if anything fails; ``path`` is then unchanged. Errors propagate as raised.
    With the default temporary name, those left by writers that were killed are removed first.

    Example::

        atomic_write("out/summary.json", lambda f: f.write(json.dumps(summary).encode()))
    """
    path = Path(path)
    if tmp is None:
        remove_stale_temporaries(path)
        tmp = temporary_name(path)
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
