"""Unit tests of the Ray Train glue: which strategies run under Ray, their Ray form, and train.py's refusals.

The multi-process runs on a real two-node Ray cluster are in ``test_ray_train_integration.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import lightning_mgpu  # noqa: F401  (registers the bundle's names)
from tests.helpers.launch import import_train_script
from tests.helpers.runif import RunIf, require_or_skip


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("dp", "one process per device"),
        ("horovod", "horovodrun"),
        ("ddp_spawn", "use 'ddp'"),
        ("sharded_spawn", "use 'sharded'"),
        ("sharded_fsdp2_spawn", "use 'sharded_fsdp2'"),
        ("fsdp", "use 'ddp' or 'sharded'"),
        ("no_such_strategy", "not registered"),
    ],
)
def test_strategies_that_cannot_run_on_ray_are_refused_with_the_fix(name: str, says: str) -> None:
    from lightning_mgpu.launchers.ray_train import RayStrategyError, check_strategy

    with pytest.raises(RayStrategyError, match=says.replace("(", r"\(")):
        check_strategy(name)


@pytest.mark.parametrize("name", ["ddp", "sharded", "ddp_sharded", "sharded_fsdp2", "ddp_find_unused_parameters_true"])
def test_popen_ddp_and_sharded_names_run_on_ray(name: str) -> None:
    from lightning_mgpu.launchers.ray_train import check_strategy

    check_strategy(name)


def test_ray_forms_keep_the_registered_settings() -> None:
    require_or_skip("ray.train")
    from ray.train.lightning import RayDDPStrategy

    from lightning_mgpu.launchers.ray_train import ray_strategy
    from lightning_mgpu.strategies import FSDP2Strategy, ShardedStrategy, ZeroStrategy

    fsdp2 = ray_strategy("sharded_fsdp2")
    assert isinstance(fsdp2, FSDP2Strategy) and isinstance(fsdp2, RayDDPStrategy)  # prepare_trainer accepts it
    # The engine's methods come first: the sharding is the bundle's, only device and ranks are Ray's.
    assert type(fsdp2).configure_ddp is FSDP2Strategy.configure_ddp
    assert isinstance(ray_strategy("sharded"), ShardedStrategy)
    assert ray_strategy("sharded_find_unused_parameters_true").find_unused_parameters is True
    assert isinstance(ray_strategy("sharded_zero"), ZeroStrategy)
    ddp = ray_strategy("ddp")
    assert type(ddp) is RayDDPStrategy


def test_ray_launch_checks_its_numbers(tmp_path: Path) -> None:
    from lightning_mgpu.launchers.ray_train import RayLaunch

    with pytest.raises(ValueError, match="1 or more workers"):
        RayLaunch(num_workers=0, storage_path=tmp_path)
    with pytest.raises(ValueError, match="-1 \\(no limit\\)"):
        RayLaunch(num_workers=2, storage_path=tmp_path, max_failures=-2)
    # Ray resolves a relative storage path on each worker; the launch makes it absolute on the driver.
    assert RayLaunch(num_workers=1, storage_path=Path("rel")).storage_path.is_absolute()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--launcher", "ray", "--devices", "2"], "pass --ray-workers N"),
        (["--launcher", "ray", "--num-nodes", "2"], "pass --ray-workers N"),
        (["--ray-address", "auto"], "only apply to --launcher ray"),
        (["--max-failures", "2"], "only apply to --launcher ray"),
        # These three are decided after the check that ray.train imports (without Ray: "Install the `ray` extra").
        pytest.param(
            ["--launcher", "ray", "--strategy", "dp"], "cannot run under Ray Train", marks=RunIf(ray=True).marks
        ),
        pytest.param(
            ["--launcher", "ray", "--strategy", "sharded_spawn"], "use 'sharded'", marks=RunIf(ray=True).marks
        ),
        (["--launcher", "ray", "--max-failures", "-3"], "--max-failures must be -1"),
        pytest.param(
            ["--launcher", "ray", "--ray-workers", "64"],
            "--ray-workers 64 asks for more local CPU workers",
            marks=RunIf(ray=True).marks,
        ),
    ],
)
def test_train_py_refuses_bad_ray_flags_before_starting_ray(
    flags: list[str], says: str, capsys: pytest.CaptureFixture
) -> None:
    # In-process: parse_args alone decides, and it must decide before anything starts.
    train = import_train_script()
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(["--accelerator", "cpu", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert "Ray: starting" not in err


@pytest.mark.parametrize(
    ("address", "env", "endpoint"),
    [
        ("10.0.0.5:6380", {}, ("10.0.0.5", 6380)),
        ("ray://head.example:10002", {}, ("head.example", 10002)),
        ("ray://head.example", {}, ("head.example", 10001)),  # the Ray Client server's default port
        ("head.example", {}, ("head.example", 6379)),  # the GCS's default port
        ("[::1]:7000", {}, ("::1", 7000)),
        ("auto", {"RAY_ADDRESS": "192.0.2.7:6390"}, ("192.0.2.7", 6390)),  # Ray's own order: RAY_ADDRESS first
    ],
)
def test_the_endpoint_a_ray_address_connects_to(
    address: str, env: dict[str, str], endpoint: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_mgpu.launchers.ray_train import _endpoint

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert _endpoint(address) == endpoint


def test_an_unreachable_ray_address_is_refused_in_bound_naming_it() -> None:
    import socket
    import time

    from lightning_mgpu.launchers.ray_train import RayAddressError, check_reachable

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]  # bound, never listening: every connection is refused
        start = time.monotonic()
        with pytest.raises(
            RayAddressError, match=rf"--ray-address 127.0.0.1:{port}: nothing answered at 127.0.0.1:{port} within 1.5 s"
        ):
            check_reachable(f"127.0.0.1:{port}", timeout_s=1.5)
        assert time.monotonic() - start < 10
        taken.listen()
        check_reachable(f"127.0.0.1:{port}", timeout_s=1.5)  # a listening head passes


@RunIf(ray=True)
def test_a_local_ray_that_misses_its_start_deadline_names_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ray's own failure on a busy machine (its raylet's fixed 30 s), raised where ray.init would raise it: the run
    says what to do instead. (The real timeout needs a saturated machine; the message is Ray 2.60's.)"""
    import ray

    from lightning_mgpu.launchers.ray_train import RayLaunch, RayStartError, ray_cluster

    def init(**kwargs: object) -> None:
        raise Exception(
            "The current node timed out during startup. This could happen because some of the raylet failed to "
            "startup or the GCS has become overloaded."
        )

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(RayStartError, match=r"ray start --head --num-cpus 2.*--ray-address auto"):
        with ray_cluster(RayLaunch(num_workers=2, storage_path=tmp_path)):
            pass
