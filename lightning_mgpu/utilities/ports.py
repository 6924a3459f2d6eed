"""Explain "Address already in use" before torch.distributed hits it.

When ``MASTER_PORT`` is unset, Lightning picks a free port itself, so the error cannot happen.
It happens when ``MASTER_PORT`` is pinned and a previous run (often a killed one whose workers
linger) still holds the port; torch then fails deep inside TCPStore. :func:`check_master_port`
turns that into an error that says what is wrong and how to fix it.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

log = logging.getLogger(__name__)


class PortInUseError(RuntimeError):
    """``MASTER_PORT`` is already bound by another process."""


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be bound on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR, a port in TIME_WAIT would be reported busy although torch can bind it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_master_port(env: dict[str, str] | None = None) -> None:
    """Raise :class:`PortInUseError` if the launching process would fail to bind ``MASTER_PORT``.

    Only the process that creates the rendezvous store binds the port: the first process of
    node 0 before it launches workers. Workers (``LOCAL_RANK`` set) and other nodes skip the check.

    Args:
        env: the environment to read; defaults to ``os.environ``.

    Raises:
        PortInUseError: the port is taken; the message says how to free it or pick another.
        ValueError: ``MASTER_PORT`` is not a valid port number.

    Example::

        check_master_port()  # before trainer.fit(...) in a script launched with MASTER_PORT=29500
    """
    env = dict(os.environ if env is None else env)
    port_text = env.get("MASTER_PORT")
    if not port_text or "LOCAL_RANK" in env or env.get("NODE_RANK", "0") != "0" or env.get("GROUP_RANK", "0") != "0":
        return
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(
            f"MASTER_PORT={port_text!r} is not a port number; set an integer in 1024-65535 or unset it."
        ) from None
    if not 0 < port < 65536:
        raise ValueError(f"MASTER_PORT={port} is out of range; set an integer in 1024-65535 or unset it.")
    if not port_is_free(port):
        raise PortInUseError(
            f'MASTER_PORT={port} is already in use ("Address already in use"), usually by workers of an earlier run'
            f" that did not exit. Free it (`fuser -k {port}/tcp`, or find the process with `lsof -i :{port}`), choose"
            " another MASTER_PORT, or unset MASTER_PORT so that Lightning picks a free port."
        )


def release_for_spawn(cluster_environment: Any, num_nodes: int = 1) -> None:
    """Make ``MASTER_PORT`` usable by the workers a spawn launcher is about to start from this process.

    A fit that ran in this process before (``devices=1``, or any in-process strategy) leaves its process group,
    and its rendezvous store bound to ``MASTER_PORT``, alive (destroying the group does not close the store);
    Lightning left that port in ``os.environ``, and the spawned workers then fail with "address already in use".
    On one machine a free port is chosen instead, with a one-line notice; the earlier group is left as it is.

    Raises:
        PortInUseError: the port is taken and the job spans several nodes, which must agree on it.
    """
    text = os.environ.get("MASTER_PORT")
    if not text or not text.isdigit() or port_is_free(int(text)):
        return
    if num_nodes > 1:
        raise PortInUseError(
            f"MASTER_PORT={text} is already in use on this node, and the other nodes expect it. Free it (`fuser -k"
            f" {text}/tcp`) or set another MASTER_PORT on every node."
        )
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    port = find_free_network_port()
    os.environ["MASTER_PORT"] = str(port)
    # LightningEnvironment caches the port it first read; it is what the spawn launcher exports to the workers.
    if hasattr(cluster_environment, "_main_port"):
        cluster_environment._main_port = port
    log.warning("MASTER_PORT=%s is in use (an earlier run in this process, or another program); using %d.", text, port)


def release_port_of_earlier_fit() -> None:
    """Before a Trainer is built: if an earlier in-process fit left its one-process group bound to ``MASTER_PORT``,
    move ``MASTER_PORT`` to a free port (with the notice of :func:`release_for_spawn`).

    This covers Lightning's own strategies, whose spawn launcher we do not own: ``Trainer(strategy="ddp", devices=1)``
    then ``Trainer(strategy="ddp_spawn", devices=2)`` in one notebook fails in the workers with "address already in
    use" on plain Lightning 2.6. Nothing happens inside a multi-process job (a group of more than one process): there
    the port is the job's and must stay.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != 1:
        return
    release_for_spawn(None)
