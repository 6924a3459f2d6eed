"""What every sharded engine (``_sharded_base.py``) owes Lightning's own contract, on 2 real gloo ranks.

Resuming ``fit(ckpt_path=...)`` runs the hooks in ``ddp``'s order (the LightningModule's and the callbacks' load hooks
before ``configure_optimizers``), from a full file and from each engine's sharded folder, launched like ``ddp`` and like
``ddp_spawn``; a module whose ``on_load_checkpoint`` changes what ``configure_optimizers`` reads trains as under ddp.
As Lightning's ``test_trainer_model_hook_system_fit_no_val_and_resume_max_steps``, but against Lightning's own ``ddp``
run in the same test instead of a written-out list. The fits: ``tests/integration/runners/run_resume_hooks.py``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_mgpu.testing.parity import max_abs_diff
from tests.helpers.launch import launch_processes, run_python
from tests.integration.runners.run_resume_hooks import ENGINES

RUNNER = "tests.integration.runners.run_resume_hooks"
pytestmark = [pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    root = tmp_path_factory.mktemp("resume_hooks")
    rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(find_free_network_port()), "NODE_RANK": "0"}
    envs = [{**rendezvous, "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)} for rank in range(2)]
    launch_processes(["-m", RUNNER, "popen", str(root)], envs, timeout=600)
    # The spawn variants (each fit starts 2 workers: 4 fits, 8 processes) are the extended tier's; the default tier
    # checks a resume under sharded_spawn's launcher in tests/integration/reliability/test_interrupt.py.
    if request.config.getoption("--extended"):
        run_python(["-m", RUNNER, "spawn", str(root)], timeout=600)
    return root


def hooks(out: Path, label: str) -> list[list[str]]:
    """Each process's hook sequence in ``label``'s fit, sorted (rank order is not recorded, only the pid)."""
    by_pid: dict[str, list[str]] = defaultdict(list)
    for line in (out / f"{label}.hooks").read_text().splitlines():
        pid, hook = line.split()
        by_pid[pid].append(hook)
    return sorted(by_pid.values())


def weights(out: Path, label: str) -> dict[str, Any]:
    return torch.load(out / f"{label}.rank0.pt", weights_only=True)


def first_difference(got: list[str], expected: list[str]) -> str:
    index = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    return f"first difference at call {index}: {got[index - 3 : index + 4]} vs ddp's {expected[index - 3 : index + 4]}"


@pytest.mark.parametrize("source", ["file", "folder"])
@pytest.mark.parametrize("name", ENGINES)
def test_resume_runs_the_hooks_in_ddps_order(out: Path, name: str, source: str) -> None:
    expected = hooks(out, "ddp")
    assert len(expected) == 2 and expected[0] == expected[1]
    sequence = expected[0]
    # What the contract is about: the load hooks before configure_optimizers.
    assert sequence.index("on_load_checkpoint") < sequence.index("Callback.load_state_dict")
    assert sequence.index("Callback.load_state_dict") < sequence.index("configure_optimizers")
    for got in hooks(out, f"{name}_{source}"):
        assert got == sequence, first_difference(got, sequence)


@pytest.mark.extended
@pytest.mark.parametrize("name", ENGINES)
def test_spawn_variant_resume_runs_the_hooks_in_ddp_spawns_order(out: Path, name: str) -> None:
    expected = hooks(out, "ddp_spawn")
    assert len(expected) == 2  # the two workers (the launching process runs no hook of the fit)
    got = hooks(out, f"{name}_spawn")
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a == b, first_difference(a, b)


@pytest.mark.parametrize(
    "label",
    [
        *(f"{e}_{s}" for e in ENGINES for s in ("file", "folder")),
        *(pytest.param(f"{e}_spawn", marks=pytest.mark.extended) for e in ENGINES),
    ],
)
def test_what_on_load_checkpoint_sets_reaches_the_optimizer_as_under_ddp(out: Path, label: str) -> None:
    reference = weights(out, "ddp_spawn" if label.endswith("_spawn") else "ddp")
    assert max_abs_diff(weights(out, label), reference) < 1e-6
