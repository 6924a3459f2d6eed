"""Build a cache and SIGKILL the process at one sample: ``python -m tests.integration.runners.run_data_kill CACHE
KILL_AT``."""

from __future__ import annotations

import sys

from lightning_mgpu.data import preprocess
from tests.helpers.data import Features, IndexedDataset

if __name__ == "__main__":
    cache_dir, kill_at = sys.argv[1], int(sys.argv[2])
    preprocess(
        IndexedDataset(200, kill_at=kill_at), cache_dir, Features(), backend="serial", chunk_size=16, progress=False
    )
    raise SystemExit("the kill did not happen")
