"""The in-process tests; the ones that launch processes are in ``tests/integration/utilities/test_ports.py``."""

from __future__ import annotations

import socket

import pytest

from lightning_mgpu.utilities.ports import (
    PortInUseError,
    check_master_port,
    port_is_free,
)


def test_busy_port_is_explained() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not port_is_free(port)
        with pytest.raises(
            PortInUseError, match=rf"MASTER_PORT={port} is already in use.*fuser -k {port}/tcp.*unset MASTER_PORT"
        ):
            check_master_port({"MASTER_PORT": str(port)})
        # Workers and other nodes never bind the store, so they are not checked.
        check_master_port({"MASTER_PORT": str(port), "LOCAL_RANK": "1"})
        check_master_port({"MASTER_PORT": str(port), "NODE_RANK": "1"})
    assert port_is_free(port)
    check_master_port({"MASTER_PORT": str(port)})


def test_unset_or_bad_port() -> None:
    check_master_port({})
    with pytest.raises(ValueError, match="not a port number"):
        check_master_port({"MASTER_PORT": "abc"})
    with pytest.raises(ValueError, match="out of range"):
        check_master_port({"MASTER_PORT": "70000"})
