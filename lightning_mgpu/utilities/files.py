"""Writing a file so that a kill at any moment leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import glob
import os
import zipfile
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


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object], tmp: Path | None = None) -> None:
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


def checkpoint_path_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be a checkpoint to resume from, in one line, or None: checked without torch, before a run
    starts (a missing path, a folder that is not a sharded checkpoint, an empty file, a file that is not torch's).
    A file that passes may still be cut short inside: the loader says so when it reads it."""
    path = Path(path)
    if not path.exists():
        return f"{str(path)!r} does not exist; pass a .ckpt file, or a sharded checkpoint's folder, from an earlier run"
    if path.is_dir():
        if (path / ".metadata").is_file() and (path / "meta.pt").is_file():
            return None
        return (
            f"{str(path)!r} is a folder but not a sharded checkpoint (it holds no .metadata and meta.pt: a save into"
            " it was cut short, or it is not a checkpoint); pass a .ckpt file or a complete sharded folder"
        )
    if path.stat().st_size == 0:
        return f"{str(path)!r} is empty (0 bytes): it is not a checkpoint; pass a .ckpt file from an earlier run"
    with path.open("rb") as f:
        head = f.read(4)
    # torch.save writes a zip archive (PK..); files from torch < 1.6 are a pickle (protocol byte 0x80).
    if head.startswith(b"PK") and not zipfile.is_zipfile(path):
        return (
            f"{str(path)!r} is cut short or damaged (its zip archive has no end): a save into it was interrupted;"
            " pass an earlier checkpoint"
        )
    if not head.startswith((b"PK", b"\x80")):
        return (
            f"{str(path)!r} is not a torch checkpoint (it starts with {head!r}; torch.save writes a zip archive);"
            " pass a .ckpt file that Lightning or torch.save wrote"
        )
    return None
