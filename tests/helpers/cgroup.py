"""A real cap on a process's memory for tests: a Linux memory cgroup (v1 or v2) made for the test and removed after.

The process joins it itself, first thing (``join_from_env``), so that the ranks Lightning's script launcher starts
(which would inherit their parent's cgroup) each join their own. Exceeding the cap gets the process killed by the
kernel's OOM killer (SIGKILL), as on a machine or a container with that much memory.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

_V1 = Path("/sys/fs/cgroup/memory")
_V2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
ENV = "LMGPU_TEST_MEMORY_CGROUP_RANK"  # + the local rank: the folder of that rank's cgroup


def _v2_root() -> Path | None:
    for root in _V2_ROOTS:
        controllers = root / "cgroup.controllers"
        if controllers.is_file() and "memory" in controllers.read_text().split():
            return root
    return None


def available() -> str | None:
    """Why memory cgroups cannot be made here, or ``None`` when they can."""
    root = _v2_root() or (_V1 if (_V1 / "memory.limit_in_bytes").is_file() else None)
    if root is None:
        return "no memory cgroup controller (v1 or v2) is mounted"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable (needs root)"
    return None


class MemoryCgroup:
    """One cgroup with a memory limit (no swap beyond it, where the kernel accounts swap)."""

    def __init__(self, limit_bytes: int | None) -> None:
        name = f"lmgpu-test-{uuid.uuid4().hex[:10]}"
        self.v2 = _v2_root()
        self.path = (self.v2 or _V1) / name
        self.path.mkdir()
        if limit_bytes is not None:
            if self.v2:
                (self.path / "memory.max").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (self.path / "memory.swap.max").write_text("0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):  # only where swap accounting is on
                    (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))

    def peak_bytes(self) -> int:
        """The most memory the cgroup's processes used at once (v2 without ``memory.peak``: the current use)."""
        for name in ("memory.max_usage_in_bytes", "memory.peak", "memory.current"):
            f = self.path / name
            if f.is_file():
                return int(f.read_text())
        raise FileNotFoundError(f"no usage file in {self.path}")

    def oom_kills(self) -> int:
        """Processes the OOM killer killed in this cgroup (v1 ``oom_control`` on kernels >= 4.13, v2
        ``memory.events``)."""
        for name in ("memory.oom_control", "memory.events"):
            f = self.path / name
            if f.is_file():
                fields = dict(line.split() for line in f.read_text().splitlines() if len(line.split()) == 2)
                if "oom_kill" in fields:
                    return int(fields["oom_kill"])
        return int((self.path / "memory.failcnt").read_text()) if (self.path / "memory.failcnt").is_file() else 0

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()  # empty once its processes have exited


@contextlib.contextmanager
def memory_cgroups(count: int, limit_bytes: int | None) -> Iterator[list[MemoryCgroup]]:
    """``count`` cgroups, each capped at ``limit_bytes`` (``None``: uncapped, to measure), removed after."""
    groups: list[MemoryCgroup] = []
    try:
        for _ in range(count):
            groups.append(MemoryCgroup(limit_bytes))
        yield groups
    finally:
        for group in groups:
            group.remove()


def rank_env(groups: list[MemoryCgroup]) -> dict[str, str]:
    """The environment that sends local rank i into ``groups[i]`` (see :func:`join_from_env`)."""
    return {f"{ENV}{i}": str(g.path) for i, g in enumerate(groups)}


def join_from_env() -> None:
    """Move this process into its rank's cgroup, if the test named one. Call it before importing anything large."""
    path = os.environ.get(f"{ENV}{os.environ.get('LOCAL_RANK', '0')}")
    if path:
        Path(path, "cgroup.procs").write_text(str(os.getpid()))
