"""``ShardedStrategy(backend="fsdp2")``: torch FSDP2 under the ``sharded`` guarantees, on 2 CPU ranks with gloo.

Parity with ``ddp`` (SGD and Adam, accumulation, clipping), plain checkpoints that resume under ``ddp`` and on 1 or 2
ranks, and each rank holding half the optimizer state. Exact mid-epoch resume after Ctrl-C is covered in
``tests/integration/reliability/test_interrupt.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from lightning_mgpu.strategies import ShardedStrategy
from tests.helpers.launch import max_abs_diff, run_parity_sequence

pytestmark = [pytest.mark.timeout(900)]
FSDP2 = ("--strategy", "sharded", "--sharded-backend", "fsdp2")
DDP = ("--strategy", "ddp")
CONFIGS = {
    "sgd": ("--steps", "5"),
    "adam": ("--steps", "5", "--optimizer", "adam", "--lr", "0.01"),
    "accumulate": ("--steps", "4", "--accumulate", "2"),
    "clip": ("--steps", "5", "--clip-val", "0.05"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fsdp2")
    out: dict[str, Any] = {"root": root}
    # Four launches of run_parity's sequences instead of twelve single runs (a launch is mostly imports): each
    # strategy's four configurations, then the 2-rank resumes, then the 1-rank one.
    # FSDP2's sequence ends with the Adam run again, its checkpoint gathered with a plain all_gather (the path gloo on
    # CUDA takes) instead of DCP's full_state_dict.
    by_hand = {"adam_by_hand": (*CONFIGS["adam"], "--fsdp2-gather", "by_hand")}
    for label, strategy, configs in (("fsdp2", FSDP2, {**CONFIGS, **by_hand}), ("ddp", DDP, CONFIGS)):
        done = run_parity_sequence([(root / f"{label}_{name}", *strategy, "--devices", "2", *extra) for name, extra in configs.items()])
        out.update({f"{label}/{name}": params for name, params in zip(configs, done)})
    # Resume the 5-step checkpoints for 3 more steps under the other strategy and on 1 rank.
    # The data of a run depends on its length, so the reference is ddp resumed from ddp, not an 8-step run.
    resumes = {
        "ddp_from_ddp": (DDP, "2", root / "ddp_sgd"),
        "ddp_from_fsdp2": (DDP, "2", root / "fsdp2_sgd"),
        "fsdp2_from_ddp": (FSDP2, "2", root / "ddp_sgd"),
        "fsdp2_1rank_from_fsdp2": (FSDP2, "1", root / "fsdp2_sgd"),
    }
    for devices in ("2", "1"):
        names = [name for name, (_, d, _) in resumes.items() if d == devices]
        done = run_parity_sequence([(root / name, *resumes[name][0], "--devices", devices, "--steps", "8", "--resume",
                                     str(resumes[name][2] / "final.ckpt")) for name in names])  # fmt: skip
        out.update(zip(names, done))
    return out


@pytest.mark.parametrize("config", ["sgd", "adam", "accumulate", "clip"])
def test_parameters_match_ddp(runs: dict[str, Any], config: str) -> None:
    fsdp2, ddp = runs[f"fsdp2/{config}"], runs[f"ddp/{config}"]
    assert max_abs_diff(fsdp2[0], fsdp2[1]) == 0.0  # the ranks agree
    assert max_abs_diff(fsdp2[0], ddp[0]) <= 1e-6


def test_checkpoint_holds_plain_keys_and_the_ordinary_optimizer_state(runs: dict[str, Any]) -> None:
    mine = torch.load(runs["root"] / "fsdp2_adam" / "final.ckpt", weights_only=False)
    ddp = torch.load(runs["root"] / "ddp_adam" / "final.ckpt", weights_only=False)
    assert list(mine["state_dict"]) == list(ddp["state_dict"]) and all(type(v) is torch.Tensor for v in mine["state_dict"].values())
    a, b = mine["optimizer_states"][0], ddp["optimizer_states"][0]
    assert [g["params"] for g in a["param_groups"]] == [g["params"] for g in b["param_groups"]]
    assert a["state"].keys() == b["state"].keys()
    for pid, slots in b["state"].items():
        for key, value in slots.items():
            assert torch.allclose(torch.as_tensor(a["state"][pid][key]), torch.as_tensor(value), atol=1e-6), (pid, key)


def test_full_tensor_gather_writes_the_same_checkpoint_as_dcp(runs: dict[str, Any]) -> None:
    dcp = torch.load(runs["root"] / "fsdp2_adam" / "final.ckpt", weights_only=False)
    by_hand = torch.load(runs["root"] / "fsdp2_adam_by_hand" / "final.ckpt", weights_only=False)
    # The two runs really took the two paths (run_parity records the choice at the save).
    for name, by_hand_expected in (("fsdp2_adam", False), ("fsdp2_adam_by_hand", True)):
        gather = json.loads((runs["root"] / name / "gather_rank0.json").read_text())
        assert gather["by_hand"] is by_hand_expected and gather["cuda_backend"] == "gloo", (name, gather)
    assert max_abs_diff(runs["fsdp2/adam_by_hand"][0], runs["fsdp2/adam"][0]) == 0.0
    assert list(by_hand["state_dict"]) == list(dcp["state_dict"])
    assert all(torch.equal(by_hand["state_dict"][k], v) for k, v in dcp["state_dict"].items())
    a, b = by_hand["optimizer_states"][0], dcp["optimizer_states"][0]
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    for pid, slots in b["state"].items():
        assert slots.keys() == a["state"][pid].keys()
        assert all(torch.equal(torch.as_tensor(a["state"][pid][k]), torch.as_tensor(v)) for k, v in slots.items()), pid


def test_resume_under_ddp_and_from_ddp_continues_like_ddp(runs: dict[str, Any]) -> None:
    reference = runs["ddp_from_ddp"][0]
    assert max_abs_diff(runs["ddp_from_fsdp2"][0], reference) <= 1e-6
    assert max_abs_diff(runs["fsdp2_from_ddp"][0], reference) <= 1e-6


def test_two_rank_checkpoint_resumes_on_one_rank(runs: dict[str, Any]) -> None:
    # One process on the global batch continues as the 2-rank run did (up to float reordering).
    assert max_abs_diff(runs["fsdp2_1rank_from_fsdp2"][0], runs["ddp_from_ddp"][0]) <= 1e-5


def test_each_rank_holds_half_the_optimizer_state(runs: dict[str, Any]) -> None:
    def local_bytes(rank: int, label: str) -> int:
        state = torch.load(runs["root"] / f"{label}_adam" / f"optimizer_rank{rank}.pt", weights_only=False)["state"]
        tensors = [t.to_local() if hasattr(t, "to_local") else t for s in state.values() for t in s.values() if torch.is_tensor(t)]
        return sum(t.numel() * t.element_size() for t in tensors if t.dim() > 0)

    ddp = local_bytes(0, "ddp")
    assert [local_bytes(r, "fsdp2") for r in (0, 1)] == [ddp // 2, ddp // 2]


def test_bad_options_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="does not take \\['reduce_buffer_size'\\]"):
        ShardedStrategy(backend="fsdp2", reduce_buffer_size=1)
    with pytest.raises(ValueError, match="find_unused_parameters=True\\) is not supported"):
        ShardedStrategy(backend="fsdp2", find_unused_parameters=True)
    with pytest.raises(ValueError, match="options of backend='fsdp2'"):
        ShardedStrategy(backend="fairscale", reshard_after_forward=True)


_BLOCKS = """
import os, torch.distributed as dist
from torch import nn
from lightning_mgpu.strategies.sharded.fsdp2 import apply_fully_shard
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
model = nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Linear(8, 2))
print("BLOCKS", apply_fully_shard(model, 1, "cpu", False, ["1", nn.Linear]))
try:
    apply_fully_shard(nn.Sequential(nn.Linear(2, 2)), 1, "cpu", False, ["net.blocks.*"])
except ValueError as err:
    print("REFUSED", err)
dist.destroy_process_group()
"""


def test_blocks_are_chosen_as_activation_checkpointing_chooses_modules() -> None:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    from tests.helpers.launch import run_python

    out = run_python(["-c", _BLOCKS], timeout=120, env={"PORT": str(find_free_network_port())}).stdout
    assert "BLOCKS ['0', '1', '1.0', '2']" in out  # a nested block is sharded before its parent
    assert "REFUSED ShardedStrategy(fsdp_modules=...): pattern 'net.blocks.*' matched no submodule" in out
