"""Several fits in one process, as in a notebook: ``python -m tests.integration.runners.run_fit_sequence A B ...``.

Each name is a strategy; ``*_spawn`` names run on 2 spawned processes, the others on 1 device in-process.
Prints ``FIT <name> OK`` after each fit.
"""

from __future__ import annotations

import sys

import lightning_mgpu  # noqa: F401
from lightning_mgpu.testing.parity import ParityModule
from tests.helpers.trainer import quiet_trainer


def main(names: list[str]) -> None:
    for name in names:
        devices = 2 if name.endswith("_spawn") else 1
        trainer = quiet_trainer(strategy=name, devices=devices, max_steps=2, use_distributed_sampler=False)
        trainer.fit(ParityModule(global_batch=8, num_samples=16))
        print(f"FIT {name} OK", flush=True)


if __name__ == "__main__":  # spawn re-imports this module in the workers
    main(sys.argv[1:])
