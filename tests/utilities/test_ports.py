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
        with pytest.raises(PortInUseError, match=rf"MASTER_PORT={port} is already in use.*fuser -k {port}/tcp.*unset MASTER_PORT"):
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


_EARLIER_FIT = """
import os, torch.distributed as dist
from lightning_mgpu.utilities.ports import release_port_of_earlier_fit
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}")
release_port_of_earlier_fit()  # no group yet: nothing to do
assert os.environ["MASTER_PORT"] == "{port}"
dist.init_process_group("gloo", rank=0, world_size=1)  # what an in-process fit leaves behind, store bound to the port
release_port_of_earlier_fit()
assert os.environ["MASTER_PORT"] != "{port}", "the port held by this process's own store was kept"
print("MOVED", os.environ["MASTER_PORT"])
"""


def test_a_one_process_group_left_by_an_earlier_fit_gives_up_its_port() -> None:
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    from tests.helpers.launch import run_python

    port = find_free_network_port()
    proc = run_python(["-c", _EARLIER_FIT.format(port=port)], timeout=60)
    assert "MOVED" in proc.stdout and f"MASTER_PORT={port} is in use" in proc.stderr
