"""Several ranks on one GPU: the one switch the GPU tests use when fewer GPUs than ranks are visible.

NCCL refuses two ranks on one device, but gloo carries CUDA tensors and two processes can share a GPU. So a job of N
ranks runs as N *nodes* of one device each, every one of them on ``cuda:0``, with ``process_group_backend="gloo"``:
each process is started with its ``NODE_RANK`` and the shared ``MASTER_ADDR``/``MASTER_PORT`` (as Lightning documents
a multi-node launch), and Lightning's own launcher (popen or spawn) then starts that node's one rank. Every
multi-rank CUDA code path runs: device placement, DDP/FairScale/ZeRO/FSDP2 on CUDA tensors, the sharded grad scaler.
Figures from such runs are for correctness and memory; ranks that share one GPU say nothing of speed or scaling.

The switch is ``LIGHTNING_MGPU_SHARE_GPU``: unset, ranks share a GPU only when there are fewer GPUs than ranks; ``1``
forces it (e.g. to exercise it on a machine with two GPUs); ``0`` forbids it, and such tests then skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tests.helpers.launch import REPO_ROOT, clean_environ

SHARE_GPU_ENV = "LIGHTNING_MGPU_SHARE_GPU"


def shares_one_gpu(ranks: int) -> bool:
    """Whether ``ranks`` ranks run on one shared GPU here (see the module docstring for the switch)."""
    if not torch.cuda.is_available():
        return False
    setting = os.environ.get(SHARE_GPU_ENV, "")
    if setting in ("0", "1"):
        return setting == "1"
    return torch.cuda.device_count() < ranks


def node_args(world: int, accelerator: str) -> list[str]:
    """The runner flags of one node of a shared-device job: one device per node, gloo between them."""
    return ["--accelerator", accelerator, "--devices", "1", "--num-nodes", str(world), "--process-group-backend", "gloo"]


def launch_nodes(module_args: list[str], world: int, timeout: float = 300, env: dict[str, str] | None = None) -> list[str]:
    """Start ``python MODULE_ARGS`` once per node (``NODE_RANK`` 0..world-1) and wait for all of them.

    Each node's output goes to its own file. The first node that fails, or the launch passing ``timeout``, kills every
    node (a surviving rank would wait for the dead one in a collective) and raises with the failing node's last lines.

    Returns:
        Each node's output, in node order.

    Raises:
        AssertionError: a node exited non-zero, or the launch ran past ``timeout``.

    Example::

        launch_nodes(["-m", "tests.integration.runners.run_parity", "--out", str(out), *node_args(2, "gpu")], 2)
    """
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    port = find_free_network_port()
    base = {**clean_environ(), "PYTHONUNBUFFERED": "1", **(env or {})}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), base.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as tmp:
        procs, logs = [], []
        for node in range(world):
            node_env = {**base, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "NODE_RANK": str(node), "WORLD_SIZE": str(world)}
            log = open(Path(tmp) / f"node{node}.log", "w+")  # noqa: SIM115  (closed below, after the processes end)
            cmd = [sys.executable, *module_args]
            procs.append(subprocess.Popen(cmd, cwd=REPO_ROOT, env=node_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            logs.append(log)
        deadline = time.monotonic() + timeout
        try:
            while any(p.poll() is None for p in procs):
                if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)  # the node and the rank its launcher started
                p.wait()
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
            log.close()
    bad = [n for n, p in enumerate(procs) if p.returncode != 0]
    if bad:
        why = f"ran past {timeout}s" if time.monotonic() > deadline else f"node {bad[0]} exited with {procs[bad[0]].returncode}"
        raise AssertionError(f"{module_args} on {world} nodes: {why}\n{outputs[bad[0]][-8000:]}")
    return outputs
