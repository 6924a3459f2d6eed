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

import torch

from tests.helpers.launch import launch_processes

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
    return [
        "--accelerator",
        accelerator,
        "--devices",
        "1",
        "--num-nodes",
        str(world),
        "--process-group-backend",
        "gloo",
    ]


def launch_nodes(
    module_args: list[str], world: int, timeout: float = 300, env: dict[str, str] | None = None
) -> list[str]:
    """Start ``python MODULE_ARGS`` once per node (``NODE_RANK`` 0..world-1) and wait for all of them
    (:func:`~tests.helpers.launch.launch_processes`: the first failure kills every node and raises with its output).

    Example::

        launch_nodes(["-m", "tests.integration.runners.run_parity", "--out", str(out), *node_args(2, "gpu")], 2)
    """
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(find_free_network_port()), "WORLD_SIZE": str(world)}
    return launch_processes(
        module_args, [{**rendezvous, "NODE_RANK": str(node)} for node in range(world)], timeout, env
    )
