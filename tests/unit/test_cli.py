"""``python -m lightning_mgpu info | dashboard | build-horovod``.

The in-process tests; the ones that launch processes are in ``tests/integration/test_cli.py``.
"""

from __future__ import annotations

from lightning_mgpu import cli as info


def test_launch_commands_follow_the_devices() -> None:
    cpu = info.launch_commands(info.DeviceInfo(cpu_count=2, cuda_visible_devices=None, gpus=()))
    assert "--accelerator cpu" in cpu["ddp"] and "--devices 2" in cpu["ddp"] and "--gloo" in cpu["horovod"]
    gpus = info.launch_commands(info.DeviceInfo(cpu_count=16, cuda_visible_devices="2,3,5", gpus=("a", "b", "c")))
    assert (
        "--accelerator gpu" in gpus["ddp"] and "--devices 3" in gpus["ddp"] and "horovodrun -np 3 " in gpus["horovod"]
    )
    assert "--gloo" not in gpus["horovod"]


def test_missing_dependency_is_explained(monkeypatch) -> None:
    from lightning_mgpu.utilities.capabilities import capability

    monkeypatch.setattr(info, "is_available", lambda pkg: False)
    # Each strategy class declares how to install what it needs (a capability), asked by the registered name.
    assert "python -m lightning_mgpu build-horovod" in info._readiness("horovod", capability("horovod", "install_hint"))
    assert "lightning_mgpu[sharded]" in info._readiness("fairscale", capability("ddp_sharded", "install_hint"))
    assert info._readiness(None, None) == "ready"
    assert "needs horovod" in info.render()


def test_every_install_hint_names_a_command_a_pip_user_has() -> None:
    # scripts/ is not in the wheel: no message of the library may send a user there.
    import pathlib

    import lightning_mgpu

    root = pathlib.Path(lightning_mgpu.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if "scripts/build_horovod.sh" in p.read_text()]
    assert offenders == []
