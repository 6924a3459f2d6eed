"""``examples/train.py`` on two nodes under torchrun, across a real network interface.

Two torchrun agents, one per network namespace (1 process each, gloo), rendezvous on the first namespace's
address with c10d, exactly as the docstring of ``examples/train.py`` and docs/multinode.md say (host names aside).
The trained parameters must equal those of a single-node 2-process ``ddp`` run of the same seed: one run serves
every case, since ddp, FairScale's sharded and horovod train bitwise alike on 2 ranks (each averages the same two
gradients, and halving is exact; tests/integration/reliability/test_interrupt.py SAME_TRAINING).

BatchNorm's running statistics are left out of the comparison: DDP broadcasts rank 0's buffers, and c10d gives
rank 0 to whichever agent joins first; the trainable parameters do not depend on that.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lightning_mgpu.testing.parity import max_abs_diff
from tests.helpers.launch import REPO_ROOT, finish, kill_tree, launch_env, run, run_python, start
from tests.helpers.netns import two_nodes
from tests.helpers.runif import RunIf

TRAIN = str(REPO_ROOT / "examples" / "train.py")
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
COMMON = ["--max-epochs", "1", "--logger", "none", "--accelerator", "cpu"]
_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
# One thread per process on both sides: Lightning gives a lone process per node all the cores, and another thread
# count sums matrix products in another order (ulp-level differences, not a distribution bug).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _parameters(output_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(output_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    return {k: v for k, v in state.items() if not k.endswith(_BUFFERS)}


def _two_node_run(strategy: str, out: Path) -> tuple[str, float]:
    with two_nodes() as (node0, node1, how):
        port = "29400" if node0.prefix else str(29400 + os.getpid() % 1000)
        procs = []
        began = time.monotonic()
        for rank, node in enumerate((node0, node1)):
            env = launch_env(ONE_THREAD)
            if node.interface:
                env["GLOO_SOCKET_IFNAME"] = node.interface  # gloo's interface: the veth, not the host name's address
            cmd = [
                *node.prefix,
                TORCHRUN,
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"{node0.address}:{port}",
                # Inside a namespace the host name does not resolve to 10.77.0.1, so c10d cannot tell that this
                # agent hosts the rendezvous; say so (docs/multinode.md: the same on clusters with such DNS).
                *(["--rdzv-conf", "is_host=1"] if rank == 0 and node.prefix else []),
                # ...and workers would get MASTER_ADDR from the host name too: give each agent its address.
                *(["--local-addr", node.address] if node.prefix else []),
                TRAIN,
                "--strategy",
                strategy,
                "--num-nodes",
                "2",
                "--devices",
                "1",
                "--output-dir",
                str(out),
                *COMMON,
            ]
            procs.append(
                start(
                    cmd,
                    environ=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )  # its own group: a failure kills the agent and its workers
        logs = []
        try:
            for rank, proc in enumerate(procs):
                logs.append(finish(proc, timeout=300, what=f"node {rank}'s torchrun ({how})"))  # exit 0 on both
        finally:
            for proc in procs:
                if proc.poll() is None:
                    kill_tree(proc.pid)  # the agent and its workers (each in a session of its own), never an orphan
        elapsed = time.monotonic() - began
        printed = "".join(logs)
        # One rank prints the topology once, for both nodes.
        assert printed.count("effective batch = 32 per device x 1 devices x 2 nodes x 1 accumulation = 64") == 1, (
            printed[-3000:]
        )
        return how, elapsed


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The parameters of ``ddp`` on one node, 2 processes: what every multi-node run here must end with."""
    out = tmp_path_factory.mktemp("one_node")
    run_python(
        [TRAIN, "--strategy", "ddp", "--devices", "2", "--output-dir", str(out), *COMMON], timeout=300, env=ONE_THREAD
    )
    return _parameters(out)


def _assert_equal(run: dict[str, torch.Tensor], one_node: dict[str, torch.Tensor], what: str) -> None:
    worst = max_abs_diff(run, one_node)  # the same keys, or it fails
    # Same seed, same global batches, the same two-operand average: equal, not merely close.
    assert worst == 0.0, f"{what} differs from ddp on one node by {worst}"


@pytest.mark.timeout(600)
# sharded: the extended tier's. torchrun's two-node rendezvous is the launcher's, the same under ddp; FairScale's
# parity with ddp on one node is tests/integration/strategies/sharded/test_sharded.py's.
@pytest.mark.parametrize(
    "strategy", ["ddp", pytest.param("sharded", marks=[*RunIf(fairscale=True).marks, pytest.mark.extended])]
)
def test_two_nodes_under_torchrun_match_one_node(
    strategy: str, one_node: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    how, seconds = _two_node_run(strategy, tmp_path / "two_nodes")
    print(f"{strategy}: two nodes via {how}: {seconds:.1f}s")
    _assert_equal(_parameters(tmp_path / "two_nodes"), one_node, f"{strategy} on two nodes")
    summary = (tmp_path / "two_nodes" / "summary.json").read_text()
    assert '"world_size": 2' in summary


def _non_loopback_address() -> str | None:
    """An IPv4 address of this machine other than loopback: horovodrun treats it as a second, local host."""
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


@pytest.mark.timeout(600)
@RunIf(horovod=True)
def test_horovodrun_with_two_host_entries_matches_one_node(one_node: dict[str, torch.Tensor], tmp_path: Path) -> None:
    # horovodrun runs a host entry without ssh when the name resolves to an address of this machine; 127.0.0.1 and
    # the machine's own address are two such entries, so horovod sees two hosts of one slot each (cross size 2).
    # Network namespaces would need ssh into each namespace, which horovodrun has no other way around.
    second = _non_loopback_address()
    if second is None:
        pytest.skip("this machine has no IPv4 address besides loopback, so horovodrun cannot be given a second host")
    horovodrun = str(Path(sys.executable).with_name("horovodrun"))
    cmd = [
        horovodrun,
        "-np",
        "2",
        "-H",
        f"127.0.0.1:1,{second}:1",
        "--gloo",
        sys.executable,
        TRAIN,
        "--strategy",
        "horovod",
        "--devices",
        "1",
        "--output-dir",
        str(tmp_path / "two_hosts"),
        *COMMON,
    ]
    proc = run(cmd, env=ONE_THREAD, timeout=420)
    log = proc.stdout + proc.stderr
    # As in train.py's docstring: --devices is the workers per host; Horovod counts the hosts itself (2), and one rank
    # printed it.
    assert log.count("effective batch = 32 per device x 1 devices x 2 nodes x 1 accumulation = 64") == 1, log[-4000:]
    _assert_equal(_parameters(tmp_path / "two_hosts"), one_node, "horovodrun on two host entries")
