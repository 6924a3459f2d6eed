"""Unit tests of the torchrun restart glue; the restart itself runs in
tests/integration/examples/test_elastic_restart.py."""

from __future__ import annotations

import pytest

from lightning_mgpu.launchers.torchrun import (
    init_process_group_for_restart,
    restart_round,
)


class _Strategy:
    def _get_process_group_backend(self) -> str:
        return "gloo"


@pytest.mark.parametrize(
    "env",
    [
        {},  # not under torchrun
        {"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"},  # the first round: Lightning's own
        {
            "TORCHELASTIC_RESTART_COUNT": "2",
            "TORCHELASTIC_USE_AGENT_STORE": "False",
        },  # store not shared: fresh each round
    ],
)
def test_nothing_is_created_outside_a_restart_on_the_shared_store(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed as dist

    for key in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert init_process_group_for_restart(_Strategy()) is False
    assert not dist.is_initialized()


def test_a_restarted_round_gets_its_own_keys_on_the_shared_store(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    port = find_free_network_port()
    agent_store = dist.TCPStore("127.0.0.1", port, 1, is_master=True)  # the agent's, shared by every round
    env = {
        "TORCHELASTIC_RESTART_COUNT": "1",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert restart_round() == 1
    seen: dict = {}
    real_init = dist.init_process_group

    def recording_init(*args, **kwargs):
        seen.update(kwargs)
        return real_init(*args, **kwargs)

    monkeypatch.setattr(dist, "init_process_group", recording_init)
    try:
        assert init_process_group_for_restart(_Strategy()) is True
        assert dist.get_backend() == "gloo" and dist.get_world_size() == 1
        # The group's store is the agent's store under this round's prefix: its keys cannot meet the dead round's.
        seen["store"].set("probe", b"1")
        assert agent_store.check(["lightning_mgpu/restart_1/probe"])
        assert not agent_store.check(["probe"])
        assert seen["device_id"] is None  # gloo: nothing to bind
        assert init_process_group_for_restart(_Strategy()) is False  # already initialised: left as it is
    finally:
        dist.destroy_process_group()


class _CudaStrategy:
    root_device = __import__("torch").device("cuda", 1)

    def _get_process_group_backend(self) -> str:
        return "nccl"


@pytest.mark.parametrize(("version", "bound"), [("2.15.0", True), ("2.7.0", False)])
def test_a_restarted_nccl_round_binds_its_gpu_where_safe(
    version: str, bound: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.15's NCCL2 needs ``device_id`` ("Duplicate GPU detected" without it); torch 2.7.0 hung with it."""
    import torch
    import torch.distributed as dist
    from lightning.fabric.plugins.environments.lightning import find_free_network_port

    port = find_free_network_port()
    agent_store = dist.TCPStore("127.0.0.1", port, 1, is_master=True)
    env = {"TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_ADDR": "127.0.0.1"}
    for key, value in {**env, "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(torch, "__version__", version)
    seen: dict = {}
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: seen.update(kwargs, backend=backend))
    assert init_process_group_for_restart(_CudaStrategy()) is True
    assert seen["backend"] == "nccl"
    assert seen.get("device_id") == (torch.device("cuda", 1) if bound else None)
    del agent_store
