"""Unit tests of ``ddp2``: registration, topology refusals, the node share, and one node in-process.

Two nodes under torchrun are in ``test_ddp2_integration.py``.
"""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import StrategyRegistry
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_mgpu  # noqa: F401  (registers ddp2)
from lightning_mgpu.strategies.ddp2 import DDP2Strategy, DDP2TopologyError
from lightning_mgpu.testing.ddp2 import EmulatedDDP2Strategy
from lightning_mgpu.testing.dp import EmulatedDataParallelStrategy
from tests.helpers.trainer import quiet_trainer


@pytest.fixture(autouse=True)
def _no_group_left():
    yield
    if dist.is_initialized():  # an in-process fit leaves Lightning's group behind
        dist.destroy_process_group()


def test_ddp2_is_registered_and_runs_one_process_per_node() -> None:
    assert StrategyRegistry["ddp2"]["strategy"] is DDP2Strategy
    trainer = pl.Trainer(strategy="ddp2", accelerator="cpu", devices=2, num_nodes=1, logger=False)
    assert isinstance(trainer.strategy, DDP2Strategy)
    assert trainer.strategy.num_processes == 1  # Lightning's launcher starts no child per device
    assert trainer.num_devices == 1  # CPU without emulation: one device per node, like dp
    emulated = pl.Trainer(strategy=EmulatedDDP2Strategy(), accelerator="cpu", devices=3, logger=False)
    assert emulated.num_devices == 3 and emulated.strategy.node_devices == 3


@pytest.mark.parametrize(
    ("env", "says"),
    [
        # torchrun --nnodes 1 --nproc-per-node 2
        (
            {
                "TORCHELASTIC_RUN_ID": "x",
                "RANK": "0",
                "LOCAL_RANK": "0",
                "GROUP_RANK": "0",
                "WORLD_SIZE": "2",
                "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29511",
            },
            "(2 on this node)",
        ),
        # torchrun on 2 nodes x 1 process, but num_nodes=1 passed
        (
            {
                "TORCHELASTIC_RUN_ID": "x",
                "RANK": "0",
                "LOCAL_RANK": "0",
                "GROUP_RANK": "0",
                "WORLD_SIZE": "2",
                "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29511",
            },
            "started 2 process(es) for num_nodes=1",
        ),
    ],
)
def test_more_processes_than_nodes_are_refused_before_training(
    env: dict[str, str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(DDP2TopologyError) as err:
        pl.Trainer(strategy="ddp2", accelerator="cpu", devices=1, num_nodes=1, logger=False)
    assert says in str(err.value) and "--nproc-per-node 1" in str(err.value) and "--ntasks-per-node=1" in str(err.value)


def test_sync_batchnorm_is_refused_with_the_reason() -> None:
    model = _Net()
    trainer = quiet_trainer(strategy=EmulatedDDP2Strategy(), devices=2, max_steps=1, sync_batchnorm=True)
    with pytest.raises(ValueError, match="sync_batchnorm=True is not supported under strategy='ddp2'"):
        trainer.fit(model, _loader(8))


class _ShareProbe(DDP2Strategy):
    """The node-share arithmetic with the other nodes' batch sizes given."""

    def __init__(self, others: list[int]) -> None:
        super().__init__()
        self.others = others

    @property
    def world_size(self) -> int:
        return 1 + len(self.others)

    @property
    def root_device(self) -> torch.device:
        return torch.device("cpu")

    def reduce(self, tensor, group=None, reduce_op="sum"):  # the all-reduce of (samples, counted)
        return tensor + torch.tensor([[float(n), 1.0 if n else 0.0] for n in self.others], dtype=tensor.dtype).sum(0)


@pytest.mark.parametrize(
    ("mine", "others", "share"),
    [
        (16, [16], 1.0),  # equal nodes: exactly 1.0, so nothing is rescaled
        (12, [4], 12 * 2 / 16),  # an uneven last batch: the node holds 3/4 of the samples
        (1, [3, 4], 1 * 3 / 8),
    ],
)
def test_a_node_loss_is_scaled_by_its_share_of_the_global_batch(mine: int, others: list[int], share: float) -> None:
    probe = _ShareProbe(others)
    batch = (torch.zeros(mine, 3), torch.zeros(mine))
    assert probe._node_share((batch, 0), {}) == share


class _Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Contrastive(_Net):
    def training_step(self, batch, batch_idx):
        return {"z": self.net(batch[0])}  # each replica embeds its chunk; the loss is over the whole batch

    def combine_replica_outputs(self, step_name, outputs):
        return {"loss": info_nce(outputs["z"])}


def info_nce(z: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    """InfoNCE over the batch: sample i's positive is sample i XOR 1 (pairs), every other sample a negative."""
    z = nn.functional.normalize(z, dim=1)
    logits = z @ z.T / temperature
    logits = logits.masked_fill(torch.eye(len(z), dtype=torch.bool), float("-inf"))
    target = torch.arange(len(z)) ^ 1
    return nn.functional.cross_entropy(logits, target)


def _loader(n: int, batch: int = 8) -> DataLoader:
    g = torch.Generator().manual_seed(3)
    return DataLoader(TensorDataset(torch.randn(n, 6, generator=g), torch.randn(n, 4, generator=g)), batch_size=batch)


@pytest.mark.parametrize("strategy", ["ddp2", "dp"])
def test_a_node_batch_loss_gives_the_gradients_of_one_process_on_that_batch(strategy: str) -> None:
    model, reference = _Contrastive(), _Contrastive()
    emulated = EmulatedDDP2Strategy() if strategy == "ddp2" else EmulatedDataParallelStrategy()
    quiet_trainer(strategy=emulated, devices=2, max_steps=1, use_distributed_sampler=False).fit(model, _loader(8))
    # One process, the whole batch of 8: InfoNCE sees all 8 samples (pairs straddle the replicas' chunks).
    x, _ = next(iter(_loader(8)))
    loss = info_nce(reference.net(x))
    loss.backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.1 * p.grad
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), name
    # A per-replica loss (each chunk of 4 alone) would differ: the test can tell.
    chunks = sum(info_nce(_Net().net(c)) * 0.5 for c in x.split(4))
    assert not torch.allclose(chunks, info_nce(_Net().net(x)))


def test_one_node_of_ddp2_equals_dp_on_its_devices() -> None:
    a, b = _Net(), _Net()
    quiet_trainer(strategy=EmulatedDDP2Strategy(), devices=2, max_steps=4, use_distributed_sampler=False).fit(
        a, _loader(30, batch=8)
    )  # last batch: 6
    quiet_trainer(strategy=EmulatedDataParallelStrategy(), devices=2, max_steps=4, use_distributed_sampler=False).fit(
        b, _loader(30, batch=8)
    )
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    assert not torch.equal(a.net[0].weight, copy.deepcopy(_Net()).net[0].weight)  # it trained
