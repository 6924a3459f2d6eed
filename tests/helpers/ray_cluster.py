"""A real two-node Ray cluster on this machine: ``ray start --head`` plus a second ``ray start --address``.

Each node offers 1 CPU, so 2 Ray Train workers of 1 CPU each land on different nodes. Started once per test
session (about 15 s here) and stopped with ``ray stop`` at the end. Token authentication stays on, as
``ray start`` sets it up by default; the token is made for the session and handed to every process through the
environment (:attr:`RayCluster.env`), never written to ``~/.ray``.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lightning.fabric.plugins.environments.lightning import find_free_network_port

RAY = str(Path(sys.executable).with_name("ray"))


@dataclass(frozen=True)
class RayCluster:
    address: str  # HOST:PORT of the head, for --ray-address and ray.init(address=...)
    env: dict[str, str]  # what every process that connects needs (the token)


#: How far ahead of the tests' other processes Ray's daemons run (a lower nice value). Ray 2.60 gives a new node a
#: fixed 30 s to find its raylet registered with the GCS (ray/_private/node.py, raylet_start_wait_time_s, not a
#: setting); on these 2 cores, beside the other xdist worker's job, the GCS answered too late and `ray start` and
#: `ray.init` failed with "The current node timed out during startup" (two CI runs). The daemons, and the workers the
#: raylet starts, inherit the value. Lowering it needs root (CI and this machine run as root); elsewhere it stays.
RAY_PRIORITY = -10


def ahead_of_the_tests() -> None:
    """``preexec_fn`` for a process that starts Ray: ``RAY_PRIORITY`` ahead, where the user may raise priority."""
    try:
        os.nice(RAY_PRIORITY)
    except PermissionError:
        pass


def _ray(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    proc = subprocess.run(
        [RAY, *args], env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=ahead_of_the_tests
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"`ray {' '.join(args)}` exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def _alive_nodes(address: str, env: dict[str, str]) -> int:
    code = (
        f"import ray, json; ray.init(address={address!r}, log_to_driver=False);"
        " print(json.dumps(sum(n['Alive'] for n in ray.nodes())))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0


@contextmanager
def two_node_ray_cluster() -> Iterator[RayCluster]:
    # tests/conftest.py sets the session's token before Ray is imported; a bare use of this helper makes its own.
    env = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
        **os.environ,
    }
    # One thread per 1-CPU worker, as Ray sets when nothing is inherited: the runs on this cluster are compared
    # bitwise with one-thread runs, and a thread count from the caller's environment would sum in another order.
    env["OMP_NUM_THREADS"] = "1"
    port = find_free_network_port()
    address = f"127.0.0.1:{port}"
    common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    try:
        _ray(["start", "--head", "--port", str(port), "--include-dashboard", "false", *common], env)
        _ray(["start", "--address", address, *common], env)
        deadline = time.monotonic() + 60  # the second raylet registers with the head a moment after `ray start`
        while (alive := _alive_nodes(address, env)) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the two-node Ray cluster at {address} has {alive} live node(s) after 60 s")
            time.sleep(1)
        yield RayCluster(address, {k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED")})
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
