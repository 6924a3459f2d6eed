"""Two "nodes" on one machine: network namespaces joined by a veth pair, with private addresses inside them only.

Needs root (CI runs as root). Elsewhere :func:`two_nodes` falls back to two agents on 127.0.0.1 and says so; on
CI (``CI`` set) the fallback is refused, so the real-interface path is what CI checks. The namespaces and the
veth pair are removed in a ``finally``.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SUBNET = "10.77.0"


@dataclass(frozen=True)
class Node:
    """How to run a command on one node: ``prefix + cmd``; ``address`` is reachable from the other node."""

    prefix: tuple[str, ...]
    address: str
    interface: str | None  # for GLOO_SOCKET_IFNAME: gloo must use the veth, not resolve the host name


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@contextmanager
def two_nodes() -> Iterator[tuple[Node, Node, str]]:
    """Yield ``(node0, node1, how)``; ``how`` says which path was taken, for the test output."""
    tag = uuid.uuid4().hex[:6]
    names, links = (f"lmgpu{tag}a", f"lmgpu{tag}b"), (f"lm{tag}a", f"lm{tag}b")
    try:
        _ip("netns", "add", names[0])
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        if os.environ.get("CI"):
            raise RuntimeError(
                f"CI must run the two-node test across network namespaces, but `ip netns add` failed: {err}"
            ) from err
        local = Node((), "127.0.0.1", None)
        yield local, local, "fallback: two agents on 127.0.0.1 (network namespaces need root)"
        return
    try:
        _ip("netns", "add", names[1])
        _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for i, (ns, link) in enumerate(zip(names, links)):
            _ip("link", "set", link, "netns", ns)
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", link)
            _ip("netns", "exec", ns, "ip", "link", "set", link, "up")
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        nodes = [
            Node(("ip", "netns", "exec", ns), f"{SUBNET}.{i + 1}", link)
            for i, (ns, link) in enumerate(zip(names, links))
        ]
        yield (
            nodes[0],
            nodes[1],
            f"network namespaces {names[0]} ({SUBNET}.1) and {names[1]} ({SUBNET}.2) over a veth pair",
        )
    finally:
        for ns in names:  # deleting a namespace deletes the veth end inside it, and with it the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
