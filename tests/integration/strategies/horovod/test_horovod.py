"""``strategy="horovod"``: real Horovod (Gloo) runs on CPU.

These tests share six launches (each costs seconds of interpreter and Horovod start-up):

- ``horovodrun -np 2 --gloo`` running every scenario of ``tests/integration/runners/run_horovod_scenarios.py`` in one
  pair of workers;
- the self-launch, ``Trainer(strategy="horovod", devices=2)`` from a plain ``python`` (the script runs again as
  rank 1), resuming a checkpoint, with a model that cannot be pickled;
- one plain process resuming that checkpoint under horovod (1 worker), ddp, dp, sharded and no strategy;
- ``horovodrun -np 2 --gloo python examples/train.py --strategy horovod``;
- a self-launch whose rank 1 raises, and one whose rank 1 dies after rank 0 finished.

References (one process, the global batch) run in this process. Horovod is imported here but never
initialised (``hvd.init()`` runs only in the launched workers).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from lightning_mgpu.testing.parity import max_abs_diff
from tests.helpers.launch import run_command as _run
from tests.helpers.runif import RunIf

pytestmark = RunIf(horovod=True).marks

HOROVODRUN = str(Path(sys.executable).with_name("horovodrun"))
SCENARIOS = "tests.integration.runners.run_horovod_scenarios"
PARITY_ATOL = 1e-5


def _params(folder: Path, rank: int = 0) -> dict[str, torch.Tensor]:
    return torch.load(folder / f"params_rank{rank}.pt")


def _info(folder: Path, rank: int = 0) -> dict:
    return json.loads((folder / f"info_rank{rank}.json").read_text())


# ----------------------------------------------------------------------------- integration


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("horovod")


@pytest.fixture(scope="module")
def workers(runs: Path) -> tuple[Path, str]:
    """Every scenario in one ``horovodrun -np 2 --gloo`` launch."""
    out = runs / "workers"
    _, log, _ = _run(
        [HOROVODRUN, "-np", "2", "--gloo", sys.executable, "-m", SCENARIOS, "workers", str(out)], timeout=420
    )
    return out, log


@pytest.fixture(scope="module")
def references(runs: Path) -> Path:
    """Single-process training on the global batch, in this process."""
    from tests.integration.runners import run_horovod_scenarios as scenarios

    out = runs / "references"
    for name, spec in scenarios.REFERENCES.items():
        scenarios.run_scenario(name, spec, out, strategy="auto", devices=1)
    resumed = dataclasses.replace(scenarios.SCENARIOS["plain"], steps=scenarios.RESUMED_STEPS)
    scenarios.run_scenario("resumed", resumed, out, strategy="auto", devices=1, ckpt=str(out / "plain" / "final.ckpt"))
    return out


def _assert_ranks_equal_and_match(folder: Path, reference: Path, atol: float = PARITY_ATOL) -> None:
    rank0, rank1 = _params(folder, 0), _params(folder, 1)
    assert max_abs_diff(rank0, rank1) == 0.0, "workers ended with different parameters"
    diff = max_abs_diff(rank0, _params(reference))
    assert diff <= atol, f"{folder.name}: differs from single-process training on the global batch by {diff}"


def _rounds(info: dict) -> list[float]:
    """Allreduce rounds per optimizer: each round reduces every parameter of that optimizer once."""
    calls = info["allreduce_calls"]
    return [calls.get(f"opt{i}", 0) / n for i, n in enumerate(info["params_per_optimizer"])]


def test_parity_with_single_process_on_the_global_batch(workers: tuple[Path, str], references: Path) -> None:
    out, log = workers
    _assert_ranks_equal_and_match(out / "plain", references / "plain")
    info = _info(out / "plain")
    assert info["optimizer_types"] == ["horovod.torch.optimizer.SGD"]  # wrapped in hvd.DistributedOptimizer
    assert _rounds(info) == [info["global_step"]] == [4]
    assert "effective batch size = 16 per worker x 2 workers x 1 accumulation = 32" in log


def test_accumulation_reduces_once_per_step_and_equals_the_doubled_batch(
    workers: tuple[Path, str], references: Path
) -> None:
    out, _ = workers
    # 3 steps of 2 micro-batches of 32 (16 per worker), clipped by norm == 3 steps of 64 in one process.
    _assert_ranks_equal_and_match(out / "accumulate_clip_norm", references / "accumulate_clip_norm")
    info = _info(out / "accumulate_clip_norm")
    assert info["global_step"] == 3
    assert _rounds(info) == [3.0], f"expected one allreduce round per optimizer step, got {info['allreduce_calls']}"


def test_clipping_by_norm_and_value_sees_synchronized_gradients(workers: tuple[Path, str], references: Path) -> None:
    out, _ = workers
    # The clip thresholds bite: clipped and unclipped single-process runs differ a lot.
    assert (
        max_abs_diff(_params(references / "accumulate_clip_norm"), _params(references / "accumulate_unclipped")) > 1e-2
    )
    assert max_abs_diff(_params(references / "clip_value"), _params(references / "plain_unclipped_3")) > 1e-2
    # Clipping a worker's local gradients instead of the average would not match these references.
    _assert_ranks_equal_and_match(out / "accumulate_clip_norm", references / "accumulate_clip_norm")
    _assert_ranks_equal_and_match(out / "clip_value", references / "clip_value")
    info = _info(out / "clip_value")
    assert info["lrs"] == [pytest.approx(0.1 * 0.5**3)]  # the StepLR scheduler drove the wrapped optimizer
    assert _rounds(info) == [3.0]


def test_manual_optimization_with_two_optimizers_and_toggle_model(workers: tuple[Path, str], references: Path) -> None:
    out, _ = workers
    name = "manual_two_optimizers"
    _assert_ranks_equal_and_match(out / name, references / name)
    assert max_abs_diff(_params(references / name), _params(references / f"{name}_unclipped")) > 1e-2
    info = _info(out / name)
    # 3 steps per optimizer over 6 micro-batches: toggle_model(sync_grad=False) kept the others local.
    assert info["global_step"] == 6
    assert _rounds(info) == [3.0, 3.0], info["allreduce_calls"]


def test_grad_sync_toggle_callback_in_manual_optimization(workers: tuple[Path, str], references: Path) -> None:
    out, _ = workers
    # The callback wraps non-final micro-batches in strategy.block_backward_sync(): one round per step.
    _assert_ranks_equal_and_match(out / "manual_grad_sync_toggle", references / "manual_grad_sync_toggle")
    info = _info(out / "manual_grad_sync_toggle")
    assert info["global_step"] == 3 and _rounds(info) == [3.0], info["allreduce_calls"]


def test_mixed_precision_bf16_and_fp16(workers: tuple[Path, str], references: Path) -> None:
    out, _ = workers
    # Low-precision matmuls on different batch splits round differently: equal ranks, close to one process.
    _assert_ranks_equal_and_match(out / "bf16", references / "bf16", atol=5e-3)
    _assert_ranks_equal_and_match(out / "fp16", references / "fp16", atol=1e-3)
    moved = max_abs_diff(_params(references / "bf16"), _params(references / "plain_unclipped_3"))
    assert moved > 1e-2  # bf16 trained (4 steps) differently from 3 steps in fp32


def test_lightning_sees_horovod_ranks_and_rank_zero_writes_checkpoints(workers: tuple[Path, str]) -> None:
    out, log = workers
    for rank in (0, 1):
        info = _info(out / "plain", rank)
        assert (info["global_rank"], info["local_rank"], info["node_rank"]) == (rank, rank, 0)
        assert (info["world_size"], info["num_nodes"], info["num_devices"]) == (2, 1, 2)
        assert info["is_global_zero"] == (rank == 0) and info["rank_zero_only_rank"] == rank
        assert info["sampler_kwargs"] == {"num_replicas": 2, "rank": rank}
        injected = _info(out / "lightning_sampler", rank)["loader_sampler"]
        assert injected["num_replicas"] == 2 and injected["rank"] == rank
        expected_writes = [str(out / "plain" / "final.ckpt")] if rank == 0 else []
        assert info["checkpoint_writes"] == expected_writes
        checks = json.loads((out / f"checks_rank{rank}.json").read_text())
        assert checks["devices_1"] == {"world_size": 2, "num_devices": 2, "root": "cpu"}
        assert "Trainer(devices=3) does not match the 2 Horovod workers" in checks["devices_3"]
        # all_gather, broadcast, reduce and the boolean decision go through Horovod, not a local no-op.
        assert checks["collectives"] == {
            "all_gather": [[0, 10], [1, 11]],
            "all_gather_strided": [[0, 10], [1, 11]],
            "reduce_strided": [2.0, 1.0],
            "broadcast_from_1": {"from": 1},
            "reduce_mean": 1.5,
            "reduce_sum": 3.0,
            "reduce_max": 2.0,
            "reduce_int_mean": 1.5,
            "decision_all": False,
            "decision_any": True,
        }
    ckpt = torch.load(out / "plain" / "final.ckpt", map_location="cpu", weights_only=False)
    assert not any(k.startswith("module.") for k in ckpt["state_dict"])
    assert max_abs_diff(ckpt["state_dict"], _params(out / "plain")) == 0.0
    assert "learning rates x 2 (hvd.size()): 0.1 -> 0.2" in log
    assert _info(out / "scale_lr")["lrs"] == [pytest.approx(0.2)]


def test_uneven_batches_per_worker_do_not_hang(workers: tuple[Path, str]) -> None:
    out, log = workers
    rank0, rank1 = _info(out / "uneven", 0), _info(out / "uneven", 1)
    # 2 epochs of 3 and 5 batches: the first worker waited in hvd.join() instead of deadlocking.
    assert (rank0["global_step"], rank1["global_step"]) == (6, 10)
    assert max_abs_diff(_params(out / "uneven", 0), _params(out / "uneven", 1)) == 0.0
    assert "re-synchronised from rank 1" in log
    assert "val_loss" in rank0["callback_metrics"]


@RunIf(fairscale=True)
def test_self_launch_from_plain_python_resumes_from_two_workers_and_from_one(
    workers: tuple[Path, str], references: Path, runs: Path
) -> None:
    out, _ = workers
    target = runs / "self_launch"
    cmd = [sys.executable, "-m", SCENARIOS, "self-launch", str(target), "--ckpt", str(out / "plain" / "final.ckpt")]
    # Also 1 -> 2 workers: the single-process reference's checkpoint resumed by 2 self-launched workers.
    cmd += ["--single-ckpt", str(references / "plain" / "final.ckpt")]
    _, log, _ = _run(cmd, timeout=420)
    # The script ran again as rank 1 (once: the second Trainer runs in the workers the first one started).
    assert log.count("starting 2 workers on localhost (this process is rank 0; the script runs again") == 1, log[-4000:]
    for name in ("self_launch", "self_launch_from_one"):
        for rank in (0, 1):
            diff = max_abs_diff(_params(target / name, rank), _params(references / "resumed"))
            assert diff <= PARITY_ATOL, f"{name}, rank {rank}: {diff}"
            info = _info(target / name, rank)
            assert info["global_step"] == 8 and "train_loss" in info["callback_metrics"], (name, rank)
            assert (info["global_rank"], info["world_size"]) == (rank, 2), info


def test_a_model_that_keeps_its_optimizer_pickles_after_fit(runs: Path) -> None:
    """``torch.save(model)`` after a horovod fit, for a model that reaches its optimizer (it kept a hook's argument):
    horovod's per-call optimizer class failed it ("Can't pickle <class 'horovod.torch.optimizer.SGD'>"), where ddp
    saves. The copy holds a plain ``torch.optim.SGD`` over the copy's own parameters, with the trained state."""
    target = runs / "pickle_after_fit"
    _run([sys.executable, "-m", SCENARIOS, "pickle-after-fit", str(target)], timeout=420)
    for rank in (0, 1):
        info = json.loads((target / f"pickle_rank{rank}.json").read_text())
        assert info["kept_is_the_trainers"] and info["still_distributed"], info
        for how in ("torch_save", "pickle"):
            assert info[how] == {
                "optimizer_class": "torch.optim.sgd.SGD",
                "params_are_the_models": True,
                "state_equal": True,
                "lr": 0.1,
                "weights_equal": True,
            }, (rank, how)


def test_checkpoint_resumes_in_other_strategies_and_worker_counts(
    workers: tuple[Path, str], references: Path, runs: Path
) -> None:
    from lightning_mgpu.checkpoint.io import load_state_dict
    from lightning_mgpu.testing.parity import ParityModule

    out, _ = workers
    target = runs / "elsewhere"
    cmd = [sys.executable, "-m", SCENARIOS, "elsewhere", str(target), "--ckpt", str(out / "plain" / "final.ckpt")]
    _run([*cmd, "--scaled-ckpt", str(out / "scale_lr" / "final.ckpt")], timeout=420)
    assert json.loads((target / "elsewhere.json").read_text())["horovod_imported_at_start"] is False
    for strategy in ("horovod", "ddp", "dp", "sharded", "auto"):
        diff = max_abs_diff(_params(target / f"resume_{strategy}"), _params(references / "resumed"))
        assert diff <= PARITY_ATOL, f"resume under {strategy}: {diff}"
    # A plain module loads the weights (plain keys).
    plain = load_state_dict(ParityModule(), out / "plain" / "final.ckpt")
    assert max_abs_diff(plain.state_dict(), _params(out / "plain")) == 0.0
    # scale_lr: 0.2 at 2 workers becomes 0.1 at 1 worker (rescaled, not compounded).
    assert _info(target / "scale_lr_resumed")["lrs"] == [pytest.approx(0.1)]


def test_a_failing_rank_fails_the_whole_job_promptly(runs: Path) -> None:
    code, log, elapsed = _run(
        [sys.executable, "-m", SCENARIOS, "failing", str(runs / "failing")], timeout=300, expect_ok=False
    )
    assert code != 0
    # Bounded, not a hang: start-up (~10 s here) plus the launcher's stop; far below Horovod's own timeouts.
    assert elapsed < 120, f"the job took {elapsed:.0f}s to fail after one rank raised"
    assert "rank 1 fails on purpose" in log
    # Rank 0 names the worker that failed, from its watch of the script's second run or from its own broken collective.
    assert re.search(r"rank 1 \(pid \d+\) exited with code 1", log), log[-4000:]
    assert not (runs / "failing" / "unexpected_success").exists()


def test_a_worker_failing_after_rank_0_finished_still_fails_the_job(runs: Path) -> None:
    """Rank 0 of a self-launch waits for the script's other runs at exit: a worker that died after fit (here with
    exit code 3, while rank 0 had finished) makes the job exit non-zero, naming it, as horovodrun would."""
    code, log, _ = _run(
        [sys.executable, "-m", SCENARIOS, "failing-after-fit", str(runs / "after_fit")], timeout=300, expect_ok=False
    )
    assert (runs / "after_fit" / "rank0_finished").exists(), "rank 0 did not finish its fit: this tests nothing"
    assert code == 1, log[-4000:]
    assert re.search(r"worker rank 1 \(pid \d+\) exited with code 3", log), log[-4000:]


def test_train_script_under_horovodrun(runs: Path) -> None:
    from lightning_mgpu.checkpoint.io import load_state_dict
    from lightning_mgpu.demos import ImageClassifier

    out = runs / "train_script"
    cmd = [HOROVODRUN, "-np", "2", "--gloo", sys.executable, "examples/train.py", "--strategy", "horovod"]
    _, log, _ = _run([*cmd, "--max-epochs", "1", "--batch-size", "128", "--output-dir", str(out)], timeout=420)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["effective_batch_size"] == 256
    assert summary["global_step"] == 6  # ceil(1437 / 2 / 128) batches per worker
    assert "effective batch size = 128 per worker x 2 workers x 1 accumulation = 256" in log
    assert list((out / "logs").iterdir()) == [out / "logs" / "version_0"]  # only rank 0 logs
    load_state_dict(ImageClassifier(), summary["last_checkpoint_path"])  # plain keys, strict
