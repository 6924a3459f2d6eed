"""``ddp2`` on two "nodes": two torchrun agents on 127.0.0.1, one process each, two emulated devices per node.

Parity with ``ddp`` on 4 processes over the same global batches (``tests/integration/runners/run_parity.py``), with a
short last batch, with and without gradient accumulation; and the checkpoint it writes resumes under ``ddp``
and ``dp``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.fabric.plugins.environments.lightning import find_free_network_port

from lightning_mgpu.testing.parity import ParityModule, max_abs_diff
from tests.helpers.launch import (
    finish,
    join_runs,
    kill_tree,
    run_parity,
    run_parity_here,
    run_parity_sequence,
    start,
)

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
# 172 = 5 x 32 + 12: the last global batch has 12 samples (3 per ddp rank, 6 per node, 3 per emulated device).
SAMPLES = "172"
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


#: The ddp2 runs of the module, all in one launch of two torchrun agents (a launch is mostly imports): the runner walks
#: them in order in the same processes. (steps, accumulation) for the parity cases; "resumable" writes the checkpoint.
RUNS = {"no-accumulation": ("6", "1"), "accumulate-2": ("3", "2"), "resumable": ("4", "1")}


def _ddp2_on_two_nodes(root: Path) -> None:
    port = str(find_free_network_port())
    runs = [
        [
            "--strategy",
            "ddp2_emulated",
            "--devices",
            "2",
            "--num-nodes",
            "2",
            "--num-samples",
            SAMPLES,
            "--out",
            str(root / name),
            "--steps",
            steps,
            "--accumulate",
            accumulate,
        ]
        for name, (steps, accumulate) in RUNS.items()
    ]
    procs = [
        start(
            [
                TORCHRUN,
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(rank),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                port,
                "-m",
                "tests.integration.runners.run_parity",
                *join_runs(runs),
            ],
            env=ONE_THREAD,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for rank in (0, 1)
    ]
    logs = []
    try:
        for rank, proc in enumerate(procs):
            logs.append(finish(proc, timeout=300, what=f"node {rank}'s torchrun"))  # exit 0 on both nodes
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc.pid)
    # One line per run, from one process: the topology is printed by rank 0 only.
    assert "".join(logs).count(
        "strategy='ddp2': 2 node process(es), each driving 2 device(s) with DataParallel"
    ) == len(RUNS)


@pytest.fixture(scope="module")
def ddp2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the module's ddp2 runs, one subfolder per name in ``RUNS``."""
    root = tmp_path_factory.mktemp("ddp2")
    _ddp2_on_two_nodes(root)
    return root


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, dict[str, torch.Tensor]]]:
    """``ddp`` on 4 processes for each parity case, in one launch."""
    root = tmp_path_factory.mktemp("ddp")
    cases = [name for name in RUNS if name != "resumable"]
    done = run_parity_sequence(
        [
            (
                root / name,
                "--strategy",
                "ddp",
                "--devices",
                "4",
                "--num-samples",
                SAMPLES,
                "--steps",
                RUNS[name][0],
                "--accumulate",
                RUNS[name][1],
            )
            for name in cases
        ],
        env=ONE_THREAD,
    )
    return dict(zip(cases, done))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", ["no-accumulation", "accumulate-2"])
def test_ddp2_on_two_nodes_equals_ddp_on_four_processes(case: str, ddp2: Path, ddp) -> None:
    steps, accumulate = RUNS[case]
    ours = {r: torch.load(ddp2 / case / f"params_rank{r}.pt") for r in (0, 1)}
    assert max_abs_diff(ours[0], ours[1]) == 0.0  # the nodes agree
    diff = max_abs_diff(ours[0], ddp[case][0])
    print(f"ddp2 (2 nodes x 2 devices) vs ddp (4 processes), {steps} steps x {accumulate}: max |diff| = {diff:.2e}")
    assert diff <= 1e-6
    start = ParityModule().state_dict()  # the initial parameters: run_parity's model depends only on its init seed
    assert max_abs_diff(ours[0], start) > 1e-3  # it trained


@pytest.mark.timeout(600)
def test_a_ddp2_checkpoint_resumes_under_ddp_and_dp(ddp2: Path, tmp_path: Path) -> None:
    ckpt = ddp2 / "resumable" / "final.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    assert state and not any(k.startswith("module.") for k in state)  # plain keys, no wrapper prefix
    for strategy, devices in (("ddp", "2"), ("dp", "1")):
        # Resume one more step elsewhere: Lightning restores the weights, optimizer and loop position.
        run = run_parity_here if devices == "1" else run_parity  # one device: in this process, which saves a launch
        resumed = run(
            tmp_path / strategy, "--strategy", strategy, "--devices", devices, "--steps", "5", "--resume", str(ckpt)
        )
        assert set(resumed[0]) == set(state)
        assert max_abs_diff(resumed[0], {k: v for k, v in state.items()}) > 0  # it trained the fifth step from there
