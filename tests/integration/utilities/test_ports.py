"""The tests that launch processes; the in-process ones are in ``tests/unit/utilities/test_ports.py``."""

from __future__ import annotations

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
