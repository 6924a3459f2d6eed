"""``horovod`` on a GPU with the NCCL build (``lightning-mgpu build-horovod --gpu``): one worker on ``cuda:0``.

- 32-true, 16-mixed and bf16-mixed: parameters against one-process ``ddp`` on the same GPU;
- a save at step 3 and a resume to step 6: the same as ``ddp``'s save and resume;
- ``sync_batchnorm=True``: BatchNorm becomes horovod's ``SyncBatchNorm`` (GPU-only in horovod) and trains as torch's
  ``SyncBatchNorm`` does under ``ddp``; then the worker's CUDA parameters go through ``allreduce`` and
  ``broadcast_parameters``, and Horovod's timeline (``HOROVOD_TIMELINE``) shows NCCL ran them.

One GPU holds one NCCL worker: NCCL refuses two workers on one device (``ncclCommInitRank failed: invalid usage``,
recorded by ``benchmarks/probe_horovod_shared_gpu.py`` on an H200, 2026-11-28), and one worker's training reduces no
gradients (horovod's ``DistributedOptimizer`` hooks nothing at size 1). Gradients between workers are the CPU tests'
(Gloo, ``test_horovod.py``); between GPUs they need two. Skipped without a GPU or without a horovod built with NCCL.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lightning_mgpu.strategies.horovod.runtime import build_info
from lightning_mgpu.testing.parity import max_abs_diff
from tests.helpers.launch import parity_params, run_parity_sequence, run_python
from tests.helpers.runif import RunIf

pytestmark = [
    *RunIf(min_cuda_gpus=1, horovod=True).marks,
    pytest.mark.skipif(
        # Without a GPU the question is moot, and horovod stays out of the pytest process.
        not torch.cuda.is_available() or not build_info().get("nccl", False),
        reason="needs horovod built with NCCL (python -m lightning_mgpu build-horovod --gpu)",
    ),
    pytest.mark.timeout(300),
]

#: Tolerances against ddp on the same GPU (the shared-GPU test's): one horovod worker averages over itself.
ATOL = {"32-true": 1e-6, "16-mixed": 1e-3, "bf16-mixed": 5e-3}
STEPS = ("--steps", "6", "--num-samples", "96")
GPU = ("--devices", "1", "--accelerator", "gpu")


def _runs(strategy: str, root: Path) -> list[tuple[Path | str, ...]]:
    base = ("--strategy", strategy, *GPU)
    return [
        *((root / p, *base, *STEPS, "--precision", p) for p in ATOL),
        (root / "half", *base, "--steps", "3", "--num-samples", "96"),
        (root / "resumed", *base, *STEPS, "--resume", str(root / "half" / "final.ckpt")),
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every horovod and ddp run, one launch each (``--then``)."""
    root = tmp_path_factory.mktemp("horovod_gpu")
    for strategy in ("horovod", "ddp"):
        run_parity_sequence(_runs(strategy, root / strategy), timeout=240, env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    return root


@pytest.mark.parametrize("precision", list(ATOL))
def test_one_nccl_worker_matches_ddp_on_the_same_gpu(runs: Path, precision: str) -> None:
    horovod, ddp = parity_params(runs / "horovod" / precision)[0], parity_params(runs / "ddp" / precision)[0]
    assert all(t.device.type == "cpu" for t in horovod.values())  # saved as plain CPU tensors
    assert max_abs_diff(horovod, ddp) <= ATOL[precision]


def test_a_save_and_resume_on_the_gpu_matches_ddp(runs: Path) -> None:
    resumed = parity_params(runs / "horovod" / "resumed")[0]
    assert max_abs_diff(resumed, parity_params(runs / "ddp" / "resumed")[0]) <= ATOL["32-true"]
    # The resume continued: not the state at the save.
    assert max_abs_diff(resumed, parity_params(runs / "horovod" / "half")[0]) > 0


_SYNC_BN = """
import sys, torch, lightning.pytorch as pl, lightning_mgpu
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

strategy, accelerator, out = sys.argv[1:4]


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
        self.bn_class = None

    def training_step(self, batch, i):
        bn = self.net[1]
        self.bn_class = f"{type(bn).__module__}.{type(bn).__name__}"
        return nn.functional.cross_entropy(self(batch[0]), batch[1])

    def forward(self, x):
        return self.net(x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


g = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
model = Net()
pl.Trainer(strategy=strategy, accelerator=accelerator, devices=1, sync_batchnorm=True, max_steps=4, logger=False,
           enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False).fit(
    model, DataLoader(data, batch_size=16))
state = {k: v.detach().cpu() for k, v in model.net.state_dict().items()}
torch.save({"bn_class": model.bn_class, "state": state}, out)
if strategy == "horovod":
    import horovod.torch as hvd

    # One worker's DistributedOptimizer reduces nothing (horovod registers its gradient hooks only for size > 1), so the
    # build's GPU collectives are asked for by hand, on the trained model's parameters back on the GPU (Lightning's
    # teardown moved them to the CPU).
    model.cuda()
    params = [p.detach() for p in model.parameters()]
    summed = hvd.allreduce(params[0], op=hvd.Sum, name="check.allreduce")
    hvd.broadcast_parameters(dict(model.named_parameters()), root_rank=0)
    assert torch.equal(summed, params[0]) and summed.is_cuda
    # Horovod 0.28.1's timeline writer lags the operations, and shutdown drops what it has not written yet: wait (20 s
    # at most) until the broadcasts are in the file.
    import os, time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "BCAST" not in open(os.environ["HOROVOD_TIMELINE"]).read():
        time.sleep(0.1)
    hvd.shutdown()
"""


def sync_batchnorm_runs(root: Path, accelerator: str) -> dict[str, dict]:
    """The BatchNorm model under horovod (with a Horovod timeline, ``root/timeline.json``) and under ddp."""
    done = {}
    for strategy in ("horovod", "ddp"):
        env = {"HOROVOD_TIMELINE": str(root / "timeline.json")} if strategy == "horovod" else {}
        run_python(["-c", _SYNC_BN, strategy, accelerator, str(root / f"{strategy}.pt")], timeout=180, env=env)
        done[strategy] = torch.load(root / f"{strategy}.pt")
    return done


def activities(timeline: Path) -> set[str]:
    """The activity names in a Horovod timeline (``NEGOTIATE_ALLREDUCE``, ``NCCL_ALLREDUCE``, ...)."""
    return set(re.findall(r'"name": "([A-Z0-9_]+)"', timeline.read_text()))


def test_sync_batchnorm_becomes_horovods_and_the_gpu_collectives_run_on_nccl(tmp_path: Path) -> None:
    done = sync_batchnorm_runs(tmp_path, "gpu")
    assert done["horovod"]["bn_class"] == "horovod.torch.sync_batch_norm.SyncBatchNorm"
    assert done["ddp"]["bn_class"] == "torch.nn.modules.batchnorm.SyncBatchNorm"
    horovod, ddp = done["horovod"]["state"], done["ddp"]["state"]
    assert horovod.keys() == ddp.keys()  # running statistics included: they load into a plain BatchNorm
    assert max_abs_diff(horovod, ddp) <= 1e-5
    assert horovod["1.running_mean"].abs().sum() > 0  # the statistics moved
    ran = activities(tmp_path / "timeline.json")
    assert {"NCCL_ALLREDUCE", "NCCL_BCAST"} <= ran, sorted(ran)
