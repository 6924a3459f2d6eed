"""``python -m lightning_mgpu info | dashboard | build-horovod``.

The tests that launch processes; the in-process ones are in ``tests/unit/test_cli.py``.
"""

from __future__ import annotations

from lightning_mgpu.strategies import BUNDLE_STRATEGY_NAMES
from tests.helpers.launch import run_python


def test_info_command_names_every_strategy_and_version() -> None:
    out = run_python(["-m", "lightning_mgpu", "info"], timeout=120).stdout
    for name in ("ddp", "ddp_spawn", *BUNDLE_STRATEGY_NAMES):
        assert f"\n  {name} " in out, name
    for pkg in ("torch", "lightning", "fairscale", "horovod", "ray", "neptune"):
        assert f"\n  {pkg} " in out, pkg
    assert "NOT REGISTERED" not in out
    assert "horovod build" in out and "Devices:" in out and "CUDA_VISIBLE_DEVICES" in out
    assert "horovodrun -np" in out and "--strategy sharded" in out


def test_subcommands_are_listed() -> None:
    out = run_python(["-m", "lightning_mgpu", "--help"], timeout=120).stdout
    assert "info" in out and "dashboard" in out and "build-horovod" in out
