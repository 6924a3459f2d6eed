"""A rendezvous that cannot complete fails every process of ``examples/train.py`` within a bound, naming the address.

- Lightning's launcher (and SLURM, which sets the same variables): a node whose ``MASTER_ADDR:MASTER_PORT`` nobody
  listens on, and node 0 waiting for a node that never starts. ``--rdzv-timeout`` bounds both
  (lightning_mgpu/launchers/rendezvous.py); without it torch waits 30 minutes.
- Ray Train: a ``--ray-address`` where nothing answers; ``ray.init`` alone retries it for many minutes.
- torchrun: an agent whose ``--rdzv-endpoint`` cannot be reached, across a real network interface; torchrun's own
  ``--rdzv-conf read_timeout`` bounds it, as docs/multinode.md says.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from lightning.fabric.plugins.environments.lightning import find_free_network_port

from tests.helpers.launch import FAILS, REPO_ROOT, Expect, finish, kill_tree, processes_naming, start
from tests.helpers.netns import two_nodes
from tests.helpers.runif import RunIf

TRAIN = str(REPO_ROOT / "examples" / "train.py")
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
EXIT_BOUND_S = 60.0  # the bound for every process of a failed job
COMMON = ["--max-epochs", "1", "--logger", "none", "--accelerator", "cpu", "--num-nodes", "2"]


def _run(cmd: list[str], env: dict[str, str], marker: str, expect: Expect = FAILS) -> tuple[int, str, float]:
    """Run a job whose rendezvous cannot complete: it must fail (``expect``) within the bound, leaving nothing."""
    began = time.monotonic()
    proc = start(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log = finish(proc, timeout=EXIT_BOUND_S + 60, expect=expect)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    elapsed = time.monotonic() - began
    time.sleep(1.0)  # let the kernel reap the last workers
    assert processes_naming(marker) == [], f"processes of the job left behind:\n{log[-3000:]}"
    return proc.returncode, log, elapsed


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("node_rank", "devices", "says"),
    [
        # Node 1 (2 processes) reaches for node 0, which was never started: nobody listens on the port.
        pytest.param("1", "2", "trying to connect to (127.0.0.1, {port})", id="main-address-unreachable"),
        # Node 0 waits for node 1, which never comes: the same bound from the other side (the extended tier's).
        pytest.param("0", "1", "1/2 clients joined", id="a-node-never-comes", marks=pytest.mark.extended),
    ],
)
def test_a_rendezvous_that_cannot_complete_fails_every_process_in_bound(
    node_rank: str, devices: str, says: str, tmp_path: Path
) -> None:
    port = find_free_network_port()  # free, so nobody listens on it
    out = tmp_path / f"node{node_rank}"
    code, log, elapsed = _run(
        [sys.executable, TRAIN, "--devices", devices, "--rdzv-timeout", "5", "--output-dir", str(out), *COMMON],
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": node_rank},
        marker=str(out),
    )
    assert code != 0, log[-3000:]
    assert elapsed < EXIT_BOUND_S, f"took {elapsed:.1f}s\n{log[-3000:]}"
    # Every process of this node says what failed, where, and the flag that bounds it.
    expected = f"did not meet at 127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) within the 5 s rendezvous timeout"
    assert log.count(expected) == int(devices), log[-4000:]
    assert says.format(port=port) in log and "--rdzv-timeout SECONDS" in log, log[-4000:]
    assert not (out / "checkpoints").exists()  # refused before any training
    print(f"node {node_rank}: exit {code} after {elapsed:.1f}s")


@pytest.mark.timeout(240)
def test_torchrun_with_an_unreachable_endpoint_fails_in_bound_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with two_nodes() as (node0, node1, how):
        port = 29400 if node0.prefix else find_free_network_port()
        # Only node 1's agent runs, across the veth, towards node 0's address where nothing listens.
        cmd = [
            *node1.prefix,
            TORCHRUN,
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"{node0.address}:{port}",
            # On 127.0.0.1 (no namespaces) the agent would think it hosts the endpoint: say it does not.
            "--rdzv-conf",
            "read_timeout=5" + ("" if node1.prefix else ",is_host=0"),
            *(["--local-addr", node1.address] if node1.prefix else []),
            TRAIN,
            "--devices",
            "1",
            "--output-dir",
            str(out),
            *COMMON,
        ]
        code, log, elapsed = _run(cmd, {}, marker=str(out))
    assert code != 0, log[-3000:]
    assert elapsed < EXIT_BOUND_S, f"{how}: took {elapsed:.1f}s\n{log[-3000:]}"
    assert f"connect to ({node0.address}, {port})" in log, f"{how}\n{log[-4000:]}"
    assert "RendezvousConnectionError" in log, log[-4000:]
    print(f"{how}: torchrun exit {code} after {elapsed:.1f}s")


@pytest.mark.timeout(240)
@RunIf(ray=True)
@pytest.mark.extended  # the check before Ray starts is a unit test too (tests/unit/launchers); this is its launch
def test_an_unreachable_ray_address_is_refused_before_ray_starts(tmp_path: Path) -> None:
    import socket

    out = tmp_path / "run"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound and never listening: every connection is refused
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        code, log, elapsed = _run(
            [
                sys.executable,
                TRAIN,
                "--launcher",
                "ray",
                "--ray-workers",
                "2",
                "--ray-address",
                address,
                "--rdzv-timeout",
                "3",
                "--output-dir",
                str(out),
                "--max-epochs",
                "1",
                "--logger",
                "none",
                "--accelerator",
                "cpu",
            ],
            {},
            marker=str(out),
            expect=1,
        )
    assert f"error: --ray-address {address}: nothing answered at {address} within 3 s" in log, log[-3000:]
    assert "ray start --head" in log and "Ray: connecting" not in log  # refused before ray.init
    assert elapsed < EXIT_BOUND_S, f"took {elapsed:.1f}s"
