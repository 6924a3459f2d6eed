"""Save checkpoints in a loop until killed: ``python -m tests.integration.runners.run_save_loop DIR``.

Each save writes ``DIR/ckpt/last.ckpt`` through :class:`AtomicCheckpointIO` with a ``version`` counter and ~8 MB of
tensors filled with that counter, so a reader can tell a complete checkpoint of any version from a torn one.
``DIR/saving`` holds the version being written, so the test can kill the process while a save is under way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from lightning_mgpu.utilities.checkpoint import AtomicCheckpointIO


def main() -> None:
    out = Path(sys.argv[1])
    io = AtomicCheckpointIO()
    version = 0
    while True:
        version += 1
        # The marker itself by rename, so a kill never leaves it empty.
        (out / ".saving").write_text(str(version))
        os.replace(out / ".saving", out / "saving")
        state = {f"w{i}": torch.full((256, 1024), float(version)) for i in range(8)}
        io.save_checkpoint({"version": version, "state_dict": state}, out / "ckpt" / "last.ckpt")


if __name__ == "__main__":
    main()
