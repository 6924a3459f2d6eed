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
    assert "pip install -e '.[sharded]'" in info._readiness("fairscale", capability("ddp_sharded", "install_hint"))
    assert info._readiness(None, None) == "ready"
    assert "needs horovod" in info.render()


def test_every_install_hint_names_a_command_a_pip_user_has() -> None:
    # scripts/ is not in the wheel: no message of the library may send a user there.
    import pathlib

    import lightning_mgpu

    root = pathlib.Path(lightning_mgpu.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if "scripts/build_horovod.sh" in p.read_text()]
    assert offenders == []


def test_info_reports_each_names_own_dependency(monkeypatch) -> None:
    """One class serves sharded (FairScale) and sharded_fsdp2 (torch alone): each name says what it needs."""
    monkeypatch.setattr(info, "is_available", lambda pkg: pkg != "fairscale")
    rows = {line.split()[0]: line for line in info.render().splitlines() if line.startswith("  ") and "[" in line}
    for name in ("sharded", "sharded_spawn", "ddp_sharded", "ddp_sharded_spawn_find_unused_parameters_false"):
        assert "needs fairscale: pip install 'fairscale==0.4.13'" in rows[name], rows[name]
    for name in ("sharded_fsdp2", "sharded_fsdp2_spawn", "dp", "ddp2", "ddp", "ddp_spawn"):
        assert " ready " in rows[name] + " ", rows[name]


def test_info_has_a_launch_command_for_every_registered_name() -> None:
    from lightning_mgpu.strategies.registry import BUNDLE_STRATEGY_NAMES

    cpu = info.DeviceInfo(cpu_count=2, cuda_visible_devices=None, gpus=())
    commands = info.launch_commands(cpu)
    assert set(commands) == {"ddp", "ddp_spawn", *BUNDLE_STRATEGY_NAMES}
    for name, command in commands.items():
        assert f"--strategy {name}" in command
    assert "--devices 1" in commands["dp"]  # dp drives one CPU device
    assert "--devices 2" in commands["sharded_fsdp2"] and "one process per node" in commands["ddp2"]
    report = info.render()
    assert all(f"  {name} " in report for name in commands)
    for package in ("pytorch-lightning", "libcst", "plotly", "matplotlib", "safetensors", "psutil", "tensorboard"):
        assert f"  {package} " in report, package


def test_info_columns_fit_the_longest_name() -> None:
    lines = [line for line in info.render().splitlines() if "[lightning" in line]
    starts = {line.index("[") - len(line.split()[1]) for line in lines}  # where the class column starts
    assert len(starts) == 1, lines
