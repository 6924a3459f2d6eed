"""Two short fits under one strategy with GPUUtilizationMonitor, for tests/integration/monitoring/test_callback.py.

Run as ``python tests/integration/runners/run_gpu_monitor.py --strategy ddp --devices 2 --out DIR``.

- ``input``: every ``__getitem__`` sleeps, the model is tiny, ``accumulate_grad_batches=2``
  (so the synced / unsynced micro-batch timings appear): the job waits for data.
- ``compute``: no sleep, a convolutional model with few parameters: the job computes.

Each fit logs to ``DIR/<scenario>/`` with a CSVLogger; rank 0 writes ``DIR/result.json`` with
each fit's verdicts as the callback holds them (absent under ddp_spawn, whose callback copy lives
in the workers) and the path of its diagnosis.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset

import lightning_mgpu  # noqa: F401  (registers the bundle's strategies)
from lightning_mgpu.callbacks import GPUUtilizationMonitor
from tests.helpers.trainer import quiet_trainer


class SlowDataset(Dataset):
    def __init__(self, n: int, sleep_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 32, generator=g), torch.randn(n, 1, generator=g)
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)  # stands in for expensive per-sample preprocessing
        return self.x[i], self.y[i]


class Net(pl.LightningModule):
    """``mlp``: a tiny MLP on 32 features. ``conv``: convolutions on 32x32 maps, many FLOPs per
    parameter, so the step is long and the gradient all-reduce short (DDP on 2 CPU cores)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        if kind == "mlp":
            self.net = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))
        else:
            self.net = nn.Sequential(
                nn.Unflatten(1, (2, 4, 4)),
                nn.Upsample(scale_factor=8),
                nn.Conv2d(2, 24, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(24, 24, 3, padding=1),
                nn.ReLU(),
                nn.Conv2d(24, 24, 3, padding=1),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(24, 1),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


SCENARIOS = {
    # name: (sleep per sample, model, batch size, accumulate)
    "input": (0.004, "mlp", 8, 2),
    "compute": (0.0, "conv", 32, 1),
}


def fit(scenario: str, args: argparse.Namespace) -> dict:
    sleep_s, kind, batch, accumulate = SCENARIOS[scenario]
    monitor = GPUUtilizationMonitor(log_every_n_steps=2, sample_interval_s=0.05)
    trainer = quiet_trainer(
        strategy=args.strategy,
        devices=args.devices,
        max_steps=args.max_steps,
        accumulate_grad_batches=accumulate,
        logger=CSVLogger(args.out, name=scenario, version=0),
        callbacks=[monitor],
        limit_val_batches=0,
    )
    trainer.fit(Net(kind), DataLoader(SlowDataset(512, sleep_s), batch_size=batch))
    return {
        "verdicts": {d.device: d.verdict for d in monitor.last_diagnosis or []},
        "diagnosis_path": str(monitor.diagnosis_path) if monitor.diagnosis_path else None,
        "is_global_zero": trainer.is_global_zero,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--devices", default=2, type=int)
    p.add_argument("--max-steps", default=8, type=int)
    p.add_argument("--scenarios", default="input,compute")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    results = {name: fit(name, args) for name in args.scenarios.split(",")}
    if all(r["is_global_zero"] for r in results.values()):
        (args.out / "result.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
