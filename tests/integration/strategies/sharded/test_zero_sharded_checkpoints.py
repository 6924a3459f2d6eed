"""``checkpoint_format="sharded"`` with the ZeRO-style backends (FairScale OSS, torch ZeRO-1), on CPU ranks with gloo.

Each rank writes the optimizer state of the parameters it owns into the folder (the model, the same on every rank,
once); on load each rank reads only the state it owns now. Checked: the folder holds exactly what the full file of the
same run holds; a resume at the same world size continues exactly as from the full file; resumes at 1 and 4 ranks,
across backends (into FSDP2 and ``ddp``) continue like ``ddp`` (1e-6 Adam; the folder is exact, only the reduction
order differs).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from lightning_mgpu.checkpoint.io import read_checkpoint
from lightning_mgpu.checkpoint.sharded import is_sharded_checkpoint
from lightning_mgpu.testing.parity import max_abs_diff
from tests.helpers.launch import run_parity_sequence
from tests.helpers.runif import RunIf

pytestmark = [pytest.mark.timeout(900), *RunIf(fairscale=True).marks]
ADAM = ("--optimizer", "adam", "--lr", "0.01")
FAIRSCALE = ("--strategy", "sharded", "--sharded-backend", "fairscale")
ZERO = ("--strategy", "sharded", "--sharded-backend", "torch")
FSDP2 = ("--strategy", "sharded", "--sharded-backend", "fsdp2")
DDP = ("--strategy", "ddp")
SHARDED = ("--checkpoint-format", "sharded")


#: Resharding to 4 ranks (4 processes) is the extended tier's; the default tier reshards 2 -> 1 here and 2 -> 4 under
#: FSDP2 (tests/integration/strategies/fsdp2/test_fsdp2.py).
FOUR_RANKS = "fairscale_4ranks_from_zero"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("zero_sharded")
    out: dict[str, Any] = {"root": root}
    # One launch per world size (a launch is mostly imports): 5 Adam steps, then resumes to 8.
    first = {"fairscale": (*FAIRSCALE, *SHARDED), "fairscale_full": FAIRSCALE, "zero": (*ZERO, *SHARDED), "ddp": DDP}
    done = run_parity_sequence(
        [(root / name, *strategy, "--devices", "2", "--steps", "5", *ADAM) for name, strategy in first.items()]
    )
    out.update(zip(first, done))
    resumes = [
        (
            "2",
            {
                "fairscale_from_folder": (FAIRSCALE, "fairscale"),
                "fairscale_from_file": (FAIRSCALE, "fairscale_full"),
                "ddp_from_ddp": (DDP, "ddp"),
                "fsdp2_from_zero": (FSDP2, "zero"),
                "ddp_from_fairscale": (DDP, "fairscale"),
            },
        ),
        ("1", {"zero_1rank_from_fairscale": ((*ZERO, *SHARDED), "fairscale")}),
    ]
    if request.config.getoption("--extended"):
        resumes.append(("4", {FOUR_RANKS: ((*FAIRSCALE, *SHARDED), "zero")}))
    for devices, group in resumes:
        done = run_parity_sequence(
            [
                (
                    root / name,
                    *strategy,
                    "--devices",
                    devices,
                    "--steps",
                    "8",
                    *ADAM,
                    "--resume",
                    str(root / source / "final.ckpt"),
                )
                for name, (strategy, source) in group.items()
            ]
        )
        out.update(zip(group, done))
    return out


def _tensors(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    flat = {f"model.{k}": v for k, v in ckpt["state_dict"].items()}
    for i, opt in enumerate(ckpt["optimizer_states"]):
        for pid, slots in opt["state"].items():
            flat.update({f"opt{i}.{pid}.{k}": torch.as_tensor(v) for k, v in slots.items()})
    return flat


def test_the_folder_holds_what_the_full_file_of_the_same_run_holds(runs: dict[str, Any]) -> None:
    root = runs["root"]
    folder, file = root / "fairscale" / "final.ckpt", root / "fairscale_full" / "final.ckpt"
    assert is_sharded_checkpoint(folder) and file.is_file()
    # Each rank wrote its own part: two shard files, and the optimizer state of every parameter exactly once.
    assert sorted(p.name for p in folder.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    joined, whole = read_checkpoint(folder, trusted=True), read_checkpoint(file, trusted=True)
    a, b = _tensors(joined), _tensors(whole)
    assert a.keys() == b.keys() and any(k.startswith("opt0.") for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert joined["optimizer_states"][0]["param_groups"] == whole["optimizer_states"][0]["param_groups"]
    assert is_sharded_checkpoint(root / "zero" / "final.ckpt")


def test_same_world_size_resumes_exactly_as_from_the_full_file(runs: dict[str, Any]) -> None:
    assert max_abs_diff(runs["fairscale_from_folder"][0], runs["fairscale_from_file"][0]) == 0.0
    assert max_abs_diff(runs["fairscale_from_folder"][0], runs["fairscale_from_folder"][1]) == 0.0


def test_other_world_sizes_and_backends_continue_like_ddp(runs: dict[str, Any]) -> None:
    reference = runs["ddp_from_ddp"][0]
    four = [FOUR_RANKS] if FOUR_RANKS in runs else []
    for name in ("fairscale_from_folder", "zero_1rank_from_fairscale", *four, "fsdp2_from_zero", "ddp_from_fairscale"):
        assert max_abs_diff(runs[name][0], reference) <= 1e-6, name
    for name in ("zero_1rank_from_fairscale", *four):
        assert is_sharded_checkpoint(runs["root"] / name / "final.ckpt"), name
    # The folders went straight into the sharded optimizers (each rank reading what it owns), not through a whole read.
    in_place = {
        name: json.loads((runs["root"] / name / "result.json").read_text())["restored_in_place"]
        for name in (
            "fairscale_from_folder",
            "zero_1rank_from_fairscale",
            *four,
            "fsdp2_from_zero",
            "fairscale_from_file",
        )
    }
    assert in_place == {
        "fairscale_from_folder": True,
        "zero_1rank_from_fairscale": True,
        **dict.fromkeys(four, True),
        "fsdp2_from_zero": True,
        "fairscale_from_file": False,
    }, in_place
