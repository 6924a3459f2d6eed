"""Save checkpoints in a loop until killed, in children forked on request: ``python -m
tests.integration.runners.run_save_loop``.

Each line read on stdin names a folder ``DIR`` and a format (``file`` or ``sharded``); the server forks a child that
saves ``DIR/ckpt/last.ckpt`` in a loop, through :class:`AtomicCheckpointIO` (a file) or as a sharded folder
(:func:`write_sharded_checkpoint`, one process), prints the child's pid, and prints ``reaped`` once the child has died
(the test kills it with SIGKILL). Each save holds a ``version`` counter and ~8 MB of tensors filled with it, so a reader
can tell a complete checkpoint of any version from a torn one. ``DIR/saving`` holds the version being written, so the
test can kill the child while a save is under way.

Why a fork server: a fresh interpreter per trial spent ~5 s importing torch for a fraction of a second of saving. The
parent only imports; it runs no torch op, so it has no thread pool that a fork could break.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from lightning_mgpu.checkpoint.io import AtomicCheckpointIO
from lightning_mgpu.checkpoint.sharded import temporary_folder, write_sharded_checkpoint


def save_forever(out: Path, fmt: str) -> None:
    io = AtomicCheckpointIO()
    path = out / "ckpt" / "last.ckpt"
    version = 0
    while True:
        version += 1
        # The marker itself by rename, so a kill never leaves it empty.
        (out / ".saving").write_text(str(version))
        os.replace(out / ".saving", out / "saving")
        state = {f"w{i}": torch.full((256, 1024), float(version)) for i in range(8)}
        checkpoint = {"version": version, "state_dict": state}
        if fmt == "sharded":
            write_sharded_checkpoint(checkpoint, path, temporary_folder(path), coordinator=True, no_dist=True)
        else:
            io.save_checkpoint(checkpoint, path)


def main() -> None:
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                folder, fmt = line.split()
                save_forever(Path(folder), fmt)
            finally:
                os._exit(1)  # only on an error: the loop ends by SIGKILL
        print(pid, flush=True)
        os.waitpid(pid, 0)
        print("reaped", flush=True)


if __name__ == "__main__":
    main()
