"""Promise 6: ports. Fits in any order in one process; a busy MASTER_PORT; two jobs started at once.

The in-process tests; the ones that launch processes are in ``tests/integration/reliability/test_ports.py``.
"""

from __future__ import annotations

import os
import socket

import pytest
from lightning.fabric.plugins.environments import LightningEnvironment

from lightning_mgpu.utilities.ports import PortInUseError, release_for_spawn


def test_several_nodes_must_agree_so_a_busy_port_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        monkeypatch.setenv("MASTER_PORT", str(port))
        with pytest.raises(PortInUseError, match=rf"MASTER_PORT={port} is already in use.*other nodes"):
            release_for_spawn(LightningEnvironment(), num_nodes=2)
    assert os.environ["MASTER_PORT"] == str(port)  # left alone
