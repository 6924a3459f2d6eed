"""``strategy='sharded'`` on real gloo ranks: parity with ddp, memory, accumulation, clipping, checkpoints.

Three launches run every scenario of ``tests/integration/runners/run_sharded_scenarios.py`` (one process, two processes,
one process again, for the 1 -> 2 and 2 -> 1 resumes); the tests below check what they recorded. Two more
launches train ``examples/train.py`` under ``sharded_spawn`` and the 1.x alias ``ddp_sharded``, and one more runs the
``hooks`` phase (the gradients ``on_after_backward`` sees).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_mgpu.checkpoint.io import load_state_dict
from lightning_mgpu.demos import ImageClassifier
from lightning_mgpu.testing.parity import ParityModule, max_abs_diff
from tests.helpers.launch import REPO_ROOT, launch_processes, run_python
from tests.helpers.runif import RunIf
from tests.integration.runners.run_sharded_scenarios import (
    CLIP_NORM,
    GAN_ACCUMULATE,
    GLOBAL_BATCH,
    NUM_SAMPLES,
    RESUMED_STEPS,
)

SCENARIOS = "tests.integration.runners.run_sharded_scenarios"
TRAIN = str(REPO_ROOT / "examples" / "train.py")
ATOL = 1e-6


def run_ranks(args: list[str], world: int, timeout: float = 300) -> None:
    """Start ``world`` ranks of ``python ARGS`` as a launcher would (env vars); fail fast if any rank fails."""
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    rendezvous = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(find_free_network_port()),
        "NODE_RANK": "0",
        "WORLD_SIZE": str(world),
    }
    launch_processes(args, [{**rendezvous, "LOCAL_RANK": str(rank)} for rank in range(world)], timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sharded")
    single, main, back = root / "single", root / "main", root / "back"
    run_ranks(["-m", SCENARIOS, "single", str(single)], world=1)
    run_ranks(["-m", SCENARIOS, "main", str(main), "--ckpt", str(single / "single_fairscale_adam.ckpt")], world=2)
    run_ranks(["-m", SCENARIOS, "single", str(back), "--ckpt", str(main / "fairscale_adam.ckpt")], world=1)
    return {
        "ranks": [torch.load(main / f"rank{r}.pt", weights_only=False) for r in (0, 1)],
        "back": torch.load(back / "rank0.pt", weights_only=False),
        "single": single,
        "main": main,
        "backdir": back,
    }


def _ckpt(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = ATOL) -> None:
    assert max_abs_diff(a, b) <= atol, max_abs_diff(a, b)


def _assert_optimizer_states_equal(a: dict[str, Any], b: dict[str, Any], exact: bool = True) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert sorted(a["state"]) == sorted(b["state"]) == list(range(len(a["param_groups"][0]["params"])))
    for index, state in a["state"].items():
        assert state.keys() == b["state"][index].keys()
        for key, value in state.items():
            other = b["state"][index][key]
            assert torch.equal(value, other) if exact else torch.allclose(value, other, atol=ATOL), (index, key)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("backend", ["fairscale", "torch"])
def test_parameters_match_ddp(runs: dict[str, Any], backend: str, optimizer: str) -> None:
    for rank in runs["ranks"]:
        _assert_same(rank[f"params/{backend}/{optimizer}"], rank[f"params/ddp/{optimizer}"])
    r0 = runs["ranks"][0]
    # Also with a step LR schedule re-bound to the sharded optimizer, the bucketed reduction path (the
    # multi-node default, which needs gradients zero-filled instead of freed), and manual optimization.
    _assert_same(r0[f"balanced/params/{backend}"], r0["balanced/params/ddp"])
    assert r0[f"balanced/sched_bound/{backend}"] and r0[f"balanced/lr/{backend}"] == [0.1 * 0.5**2]
    assert r0[f"balanced/warnings/{backend}"] == []
    if backend == "fairscale":
        _assert_same(r0["bucketed/params/fairscale"], r0["params/ddp/sgd"])
        _assert_same(r0["bucketed/zero_grad_callback/params/fairscale"], r0["params/ddp/sgd"])
        _assert_same(r0["manual/params/fairscale"], r0["params/ddp/sgd"])


def test_manual_optimization_with_bucketed_gradients_matches_ddp(runs: dict[str, Any]) -> None:
    # `self.optimizers().zero_grad()` goes through LightningOptimizer, which must reach the bucket-safe zero_grad:
    # freeing a bucketed gradient makes FairScale reduce a stale bucket and the ranks drift apart.
    for rank in runs["ranks"]:
        _assert_same(rank["manual/bucketed/params/fairscale"], rank["params/ddp/sgd"])


@pytest.mark.parametrize("variant", ["default", "unused", "bucketed"])
def test_gan_with_toggle_model_matches_ddp(runs: dict[str, Any], variant: str) -> None:
    """Two optimizers, one backward each per training_step under toggle_model(sync_grad=...), accumulating."""
    r0 = runs["ranks"][0]
    assert max_abs_diff(r0["gan/params/ddp"], r0["gan/params/init"]) > 1e-2  # both halves trained
    for rank in runs["ranks"]:
        _assert_same(rank[f"gan/params/fairscale/{variant}"], rank["gan/params/ddp"])
    if variant != "bucketed":  # (buckets reduce several gradients in one collective)
        # Per backward: nothing while accumulating, then the generator's 4 tensors, then the discriminator's 4.
        micro_batches = NUM_SAMPLES // GLOBAL_BATCH
        expected = ([0, 0] * (GAN_ACCUMULATE - 1) + [4, 4]) * (micro_batches // GAN_ACCUMULATE)
        assert r0[f"gan/reductions/fairscale/{variant}"] == expected


def test_validate_test_and_predict_run_on_the_bare_module(runs: dict[str, Any]) -> None:
    for rank in runs["ranks"]:
        result = rank["eval"]
        assert result["models"] == {"validate": ["EvalModule"], "test": ["EvalModule"], "predict": ["EvalModule"]}
        assert abs(result["validate"] - result["expected_loss"]) < ATOL
        assert abs(result["test"] - result["expected_loss"]) < ATOL
        assert torch.allclose(result["predict"], result["expected_predict"], atol=ATOL)
    # The states agree across ranks: both evaluated the same trained parameters.
    assert runs["ranks"][0]["eval"]["validate"] == runs["ranks"][1]["eval"]["validate"]


def test_each_rank_holds_half_the_optimizer_state(runs: dict[str, Any]) -> None:
    ranks = runs["ranks"]
    for backend in ("fairscale", "torch"):
        # Four equal matrices: each of 2 ranks holds exactly half of DDP's Adam state.
        for rank in ranks:
            assert rank[f"balanced/bytes/{backend}"] * 2 == rank["balanced/bytes/ddp"] > 0
        # Unequal parameters: every parameter's state lives on exactly one rank.
        for opt in ("sgd", "adam"):
            owners = [set(rank[f"owners/{backend}/{opt}"]) for rank in ranks]
            assert owners[0].isdisjoint(owners[1]) and owners[0] | owners[1] == set(ranks[0][f"owners/ddp/{opt}"])
            assert sum(rank[f"bytes/{backend}/{opt}"] for rank in ranks) == ranks[0][f"bytes/ddp/{opt}"]
    # ZeRO-2 (FairScale): after the backward each rank keeps only the gradients it owns; torch's ZeRO-1 keeps all.
    for opt in ("sgd", "adam"):
        for rank in ranks:
            assert rank[f"grads/fairscale/{opt}"] == rank[f"owners/fairscale/{opt}"]
            assert rank[f"grads/torch/{opt}"] == rank[f"grads/ddp/{opt}"] == rank[f"owners/ddp/{opt}"]


def test_accumulation_reduces_only_on_the_final_micro_batch(runs: dict[str, Any]) -> None:
    for rank in runs["ranks"]:
        # 3 steps x 2 micro-batches; FairScale reduces each of the 6 gradients to its owner, DDP all-reduces 1 bucket.
        assert rank["accumulate/reductions/fairscale"] == [0, 6] * 3
        assert rank["accumulate/reductions/torch"] == [0, 1] * 3
        for backend in ("fairscale", "torch"):
            _assert_same(rank[f"accumulate/params/{backend}"], rank["accumulate/params/ddp"])


def test_clipping_matches_single_process_reference(runs: dict[str, Any]) -> None:
    r0 = runs["ranks"][0]
    assert min(r0["clip/reference_norms"]) > 10 * CLIP_NORM  # the clip acted at every step
    _assert_same(r0["clip/params/fairscale/norm"], r0["clip/reference/norm"], atol=1e-6)
    _assert_same(r0["clip/params/torch/norm"], r0["clip/reference/norm"], atol=1e-6)
    _assert_same(r0["clip/params/fairscale/value"], r0["clip/reference/value"], atol=1e-6)
    assert max_abs_diff(r0["params/ddp/sgd"], r0["clip/reference/norm"]) > 1e-3  # clipping changed the result


def test_bf16_mixed_needs_no_scaler_and_matches_ddp(runs: dict[str, Any]) -> None:
    r0 = runs["ranks"][0]
    assert r0["bf16/scaler/fairscale"] is False
    _assert_same(r0["bf16/params/fairscale"], r0["bf16/params/ddp"])


def test_unused_parameters_on_one_rank_match_ddp(runs: dict[str, Any]) -> None:
    for rank in runs["ranks"]:
        _assert_same(rank["unused/params/fairscale"], rank["unused/params/ddp"])


def test_checkpoint_is_plain_and_loads_into_ddp_and_a_plain_module(runs: dict[str, Any]) -> None:
    sharded, ddp = _ckpt(runs["main"] / "fairscale_adam.ckpt"), _ckpt(runs["main"] / "ddp_adam.ckpt")
    assert not any(k.startswith("module.") for k in sharded["state_dict"])
    # The consolidated optimizer state is the ordinary Adam format, identical to ddp's.
    _assert_optimizer_states_equal(sharded["optimizer_states"][0], ddp["optimizer_states"][0])
    _assert_optimizer_states_equal(
        _ckpt(runs["main"] / "torch_adam.ckpt")["optimizer_states"][0], ddp["optimizer_states"][0]
    )
    # A plain module and a plain torch optimizer take it as is.
    module = load_state_dict(ParityModule(), runs["main"] / "fairscale_adam.ckpt")
    _assert_same(dict(module.state_dict()), runs["ranks"][0]["params/fairscale/adam"], atol=0)
    torch.optim.Adam(module.parameters()).load_state_dict(sharded["optimizer_states"][0])
    # Resumed training continues identically: sharded -> ddp, ddp -> sharded, FairScale -> torch backend.
    r0 = runs["ranks"][0]
    for key in ("ddp_from_fairscale", "fairscale_from_ddp", "torch_from_fairscale"):
        _assert_same(r0[f"resumed/params/{key}"], r0["resumed/params/ddp_from_ddp"])


def test_resume_on_a_different_number_of_ranks(runs: dict[str, Any]) -> None:
    # Restoring and saving again without a step gives back exactly the optimizer state that was saved.
    for saved, resaved in (
        (runs["single"] / "single_fairscale_adam.ckpt", runs["main"] / "resaved_1to2.ckpt"),
        (runs["main"] / "fairscale_adam.ckpt", runs["backdir"] / "resaved_2to1.ckpt"),
    ):
        _assert_optimizer_states_equal(_ckpt(saved)["optimizer_states"][0], _ckpt(resaved)["optimizer_states"][0])
    r0, r1 = runs["ranks"]
    # 1 -> 2: both ranks hold a shard, and training continues as under ddp.
    assert r0["resume_1to2/owners"] and r1["resume_1to2/owners"]
    assert set(r0["resume_1to2/owners"]).isdisjoint(r1["resume_1to2/owners"])
    _assert_same(r0["resume_1to2/params/fairscale"], r0["resume_1to2/params/ddp"])
    # 2 -> 1: one process holds everything and continues as the 2-rank ddp run did (up to float reordering).
    assert len(runs["back"]["resume_2to1/owners"]) == 6
    _assert_same(runs["back"]["resume_2to1/params/fairscale"], r0["resumed/params/ddp_from_ddp"], atol=1e-5)


def test_two_rank_sharded_checkpoint_resumes_under_dp(runs: dict[str, Any]) -> None:
    back = runs["back"]
    assert (
        back["resume_2to1/dp_strategy"] == "DataParallelStrategy"
        and back["resume_2to1/dp_global_step"] == RESUMED_STEPS
    )
    # One process on the global batch continues as the 2-rank ddp run did (up to float reordering).
    _assert_same(back["resume_2to1/params/dp"], runs["ranks"][0]["resumed/params/ddp_from_ddp"], atol=1e-5)


# The extended tier's: train.py under sharded_spawn is launched in the default tier by the Ctrl-C, rank-failure and
# ports tests, the consolidated checkpoint is test_zero_sharded_checkpoints.py's, the alias is the registry's.
@pytest.mark.extended
def test_train_py_under_sharded_spawn_then_resume_under_the_ddp_sharded_alias(tmp_path: Path) -> None:
    common = ["--accelerator", "cpu", "--devices", "2", "--logger", "none", "--optimizer", "adam", "--lr", "0.01"]
    first = tmp_path / "spawn"
    # One epoch of digits is 23 steps at 2 x 32; validation runs and ModelCheckpoint writes last.ckpt.
    run_python(
        [TRAIN, "--strategy", "sharded_spawn", "--max-epochs", "1", "--output-dir", str(first), *common], timeout=300
    )
    summary = json.loads((first / "summary.json").read_text())
    assert summary["strategy"] == "sharded_spawn" and summary["world_size"] == 2 and summary["global_step"] == 23
    # (Under *_spawn the main process learns only the best path; last.ckpt is where ModelCheckpoint put it.)
    last = first / "checkpoints" / "last.ckpt"
    ckpt = _ckpt(last)
    assert not any(k.startswith("module.") for k in ckpt["state_dict"])
    model = load_state_dict(ImageClassifier(), last)
    opt_state = ckpt["optimizer_states"][0]
    assert sorted(opt_state["state"]) == list(range(len(list(model.parameters()))))  # consolidated: every parameter
    torch.optim.Adam(model.parameters()).load_state_dict(opt_state)

    second = tmp_path / "alias"
    run_python(
        [
            TRAIN,
            "--strategy",
            "ddp_sharded",
            "--max-epochs",
            "2",
            "--ckpt-path",
            str(last),
            "--output-dir",
            str(second),
            *common,
        ],
        timeout=300,
    )
    resumed = json.loads((second / "summary.json").read_text())
    assert resumed["strategy"] == "ddp_sharded" and resumed["global_step"] == 46
    assert resumed["val_acc"] is not None and resumed["val_acc"] > 0.5, resumed


@pytest.fixture(scope="module")
def hooks_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("sharded_hooks")
    run_ranks(["-m", SCENARIOS, "hooks", str(out)], world=2)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


@pytest.mark.parametrize("case", ["fairscale/module", "fairscale_bucketed/module", "fairscale/callback"])
def test_on_after_backward_sees_every_gradient_as_under_ddp(hooks_runs: list[dict[str, Any]], case: str) -> None:
    """At 64-true, the hook (the module's or a callback's) sees every gradient on every rank, reduced and in float64, as
    under ddp; right after it each rank keeps only the gradients of the parameters it owns (ZeRO-2's saving)."""
    for rank, results in enumerate(hooks_runs):
        ddp, got = results["hooks/ddp/module"], results[f"hooks/{case}"]
        assert len(got["in_hook"]) == len(ddp["in_hook"]) == 3
        for seen, expected in zip(got["in_hook"], ddp["in_hook"]):
            assert seen.keys() == expected.keys()
            for name, view in seen.items():
                assert view is not None, f"rank {rank}: {name}.grad is None in on_after_backward"
                dtype, grad = view
                assert dtype == torch.float64, (rank, name, dtype)
                torch.testing.assert_close(grad, expected[name][1], rtol=0, atol=1e-12)
        _assert_same(got["params"], ddp["params"], atol=1e-12)
        if case.endswith("module") and case != "fairscale_bucketed/module":
            # ZeRO-2 again after the hook: the step sees only this rank's own gradients.
            assert got["before_step"] == [sorted(got["owned"])] * 3, rank
    # Every parameter is owned by one rank: together the ranks held each gradient once.
    owned = [set(r["hooks/fairscale/module"]["owned"]) for r in hooks_runs]
    assert owned[0] and owned[1] and not owned[0] & owned[1]


def test_without_on_after_backward_gradients_are_freed_as_before(hooks_runs: list[dict[str, Any]]) -> None:
    """No module or callback overrides on_after_backward: FairScale's hooks free the other ranks' gradients as they
    reduce them, as before (nothing is kept for a hook nobody runs)."""
    for results in hooks_runs:
        holders = results["hooks/fairscale/plain"]["before_step"]
        assert holders == [sorted(results["hooks/fairscale/module"]["owned"])] * 3


@pytest.mark.gpu
@RunIf(min_cuda_gpus=2)
def test_fp16_mixed_on_two_gpus_uses_the_sharded_grad_scaler(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    args = ["--accelerator", "gpu", "--devices", "2", "--strategy", "sharded", "--precision", "16-mixed"]
    run_python([TRAIN, *args, "--max-epochs", "1", "--logger", "none", "--output-dir", str(out)], timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["global_step"] == 23 and summary["val_acc"] is not None
    ckpt = _ckpt(out / "checkpoints" / "last.ckpt")
    assert "scale" in ckpt["ShardedMixedPrecision"]  # the ShardedGradScaler's state, saved by Lightning
    assert sorted(ckpt["optimizer_states"][0]["state"]) == list(range(len(list(ImageClassifier().parameters()))))
