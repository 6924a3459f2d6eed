"""Glue between the bundle and Ray Train: run a Lightning training function on a Ray cluster.

Ray places the workers, sets up their process group (``TorchConfig``), and restarts the whole group when a worker
dies (``FailureConfig``); Ray Train's Lightning integration (``ray.train.lightning``) supplies the environment
plugin, the strategy base and the report callback. This module adds no launcher or actor code of its own. It maps
the bundle's strategy names onto Ray's strategy classes (``sharded`` included), hands a restarted worker the
last reported checkpoint, and brings the metrics and checkpoint path back to the driver.

Strategies under Ray:
    - ``ddp`` (and Lightning's ``ddp_find_unused_parameters_*``): ``RayDDPStrategy``.
    - ``sharded``, ``ddp_sharded``, ``sharded_zero``, ``sharded_fsdp2`` and their ``find_unused_parameters``
      spellings: the bundle's sharded engine of that name (FairScale, torch ZeRO-1, FSDP2) on Ray's device and
      environment.
    - Not ``*_spawn``: Ray starts one process per worker itself; use the name without ``_spawn``.
    - Not ``dp``: one process drives several devices there, while Ray Train runs one process per device.
    - Not ``horovod``: Ray runs Horovod through its own ``HorovodTrainer``, which the bundle does not wire; use
      ``horovodrun``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning.pytorch.strategies import DDPStrategy, Strategy, StrategyRegistry
from lightning.pytorch.utilities import rank_zero_info

from lightning_mgpu.strategies._sharded_base import ShardedBase
from lightning_mgpu.utilities.capabilities import capability
from lightning_mgpu.utilities.imports import require

#: The file Ray's report callback writes inside each reported checkpoint folder.
CHECKPOINT_NAME = "checkpoint.ckpt"


class RayStrategyError(ValueError):
    """A strategy name that cannot run under Ray Train, with the reason and the name to use."""


class RayAddressError(ConnectionError):
    """Nothing answers at the Ray address given; ``ray.init`` would retry it for many minutes without a word."""


class RayStartError(RuntimeError):
    """The local Ray started for a run did not come up in Ray's own time limit."""


@dataclass(frozen=True)
class RayLaunch:
    """Where and how a training function runs on Ray.

    Attributes:
        num_workers: training processes (Ray Train workers), one device each.
        storage_path: where Ray keeps reported checkpoints; every node must reach it (a shared filesystem or
            object store on a real cluster).
        address: ``None`` starts a local Ray for the run and shuts it down after; ``"auto"``, ``"HOST:PORT"`` or
            ``"ray://HOST:PORT"`` joins a running cluster and leaves it running.
        max_failures: how many times Ray restarts the worker group after a failure (``FailureConfig``).
        cpus_per_worker: CPUs Ray reserves for each worker.
        use_gpu: one GPU per worker (backend nccl); otherwise gloo on CPU.
        name: the run's folder under ``storage_path``.
        connect_timeout_s: how long the address may take to accept a connection before :class:`RayAddressError`.
    """

    num_workers: int
    storage_path: Path
    address: str | None = None
    max_failures: int = 0
    cpus_per_worker: float = 1.0
    use_gpu: bool = False
    name: str = "lightning_mgpu"
    connect_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.num_workers < 1:
            raise ValueError(f"RayLaunch(num_workers={self.num_workers}): pass 1 or more workers")
        if self.max_failures < -1:
            raise ValueError(f"RayLaunch(max_failures={self.max_failures}): pass -1 (no limit), 0 or more")
        if not self.storage_path.is_absolute():
            # Ray resolves a relative path against each worker's own folder, not the driver's.
            object.__setattr__(self, "storage_path", self.storage_path.resolve())


@dataclass
class RayRunResult:
    """What came back to the driver: the last reported metrics and checkpoint."""

    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint_path: Path | None = None  # the Lightning checkpoint inside Ray's last reported checkpoint


def check_strategy(name: str) -> None:
    """Raise :class:`RayStrategyError` unless ``name`` can run under Ray Train (before any worker starts)."""
    if name not in StrategyRegistry:
        raise RayStrategyError(f"strategy {name!r} is not registered; under Ray use 'ddp' or 'sharded'")
    reason = capability(name, "ray_incompatibility")
    if reason is not None:
        raise RayStrategyError(f"strategy {name!r} cannot run under Ray Train: {reason}.")
    entry = StrategyRegistry[name]
    params = entry["init_params"]
    if params.get("start_method", "popen") != "popen":
        raise RayStrategyError(
            f"strategy {name!r} starts its own processes ({params['start_method']}), but Ray starts one process per"
            f" worker itself; use {name.replace('_spawn', '').replace('_notebook', '')!r}"
        )
    if not (entry["strategy"] is DDPStrategy or issubclass(entry["strategy"], ShardedBase)):
        raise RayStrategyError(
            f"strategy {name!r} ({entry['strategy'].__name__}) has no Ray form; use 'ddp' or 'sharded'"
        )


@functools.lru_cache(maxsize=None)
def _ray_sharded_class(engine: type[ShardedBase]) -> type[Strategy]:
    # A subclass of Ray's strategy base passes `prepare_trainer`'s check, and takes the device and sampler ranks
    # from Ray's context; the sharded engine comes first in the MRO, so its sharding stays as it is.
    from ray.train.lightning import RayDDPStrategy

    return type(
        f"Ray{engine.__name__}",
        (engine, RayDDPStrategy),
        {
            "__doc__": f":class:`{engine.__module__}.{engine.__qualname__}` on a Ray Train worker.",
            "__module__": __name__,
        },
    )


def ray_strategy(name: str, **kwargs: Any) -> Strategy:
    """The Ray Train form of a registered strategy name, for use inside a Ray Train worker.

    Args:
        name: ``"ddp"``, ``"sharded"``, ``"sharded_zero"``, ``"sharded_fsdp2"`` or another popen-launched DDP/sharded
            name.
        **kwargs: passed to the strategy, over the registered name's own settings.

    Raises:
        RayStrategyError: the name cannot run under Ray (``dp``, ``horovod``, a ``*_spawn`` name), with the fix.
        MissingDependencyError: Ray Train is not installed (the ``ray`` extra).

    Example::

        trainer = pl.Trainer(strategy=ray_strategy("sharded"), **ray_trainer_kwargs())
    """
    check_strategy(name)
    require("ray.train", f"strategy {name!r} on Ray Train")
    from ray.train.lightning import RayDDPStrategy

    entry = StrategyRegistry[name]
    params = {k: v for k, v in entry["init_params"].items() if k != "start_method"} | kwargs
    engine = entry["strategy"]
    cls = _ray_sharded_class(engine) if issubclass(engine, ShardedBase) else RayDDPStrategy
    return cls(**params)


def ray_trainer_kwargs() -> dict[str, Any]:
    """The ``Trainer`` arguments every Ray Train worker needs besides its strategy: Ray's environment, its devices."""
    require("ray.train", "training on Ray Train")
    from ray.train.lightning import RayLightningEnvironment

    # Ray decides the ranks and devices; Lightning must not count processes of its own.
    return {"devices": "auto", "num_nodes": 1, "plugins": [RayLightningEnvironment()]}


def report_callback() -> Any:
    """Ray Train's callback that reports ``callback_metrics`` and a checkpoint at the end of each epoch."""
    from ray.train.lightning import RayTrainReportCallback

    return RayTrainReportCallback()


def prepare_trainer(trainer: Any) -> Any:
    """Ray Train's own check that the trainer's strategy and environment are Ray's."""
    from ray.train.lightning import prepare_trainer as ray_prepare_trainer

    return ray_prepare_trainer(trainer)


@contextlib.contextmanager
def resume_checkpoint() -> Iterator[Path | None]:
    """Inside a worker: the Lightning checkpoint to resume from after Ray restarted the group, else ``None``.

    Ray hands a restarted worker the last checkpoint reported by the callback; on remote storage it is
    downloaded for the duration of the block.
    """
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as folder:
        path = Path(folder) / CHECKPOINT_NAME
        rank_zero_info(f"Ray Train restarted the workers: resuming from {path}")
        yield path


@contextlib.contextmanager
def ray_cluster(launch: RayLaunch) -> Iterator[None]:
    """Connect to ``launch.address`` or start a local Ray sized for the workers; shut down only what this started.

    A Ray already initialised in this process is reused as it is. Preprocessing with ``backend="ray"`` inside the
    block uses this cluster (it reuses an initialised Ray) instead of starting a second one.
    """
    ray = require("ray", "--launcher ray")
    started = False
    if not ray.is_initialized():
        if launch.address is None:
            cpus = max(1, int(launch.num_workers * launch.cpus_per_worker + 0.999))
            rank_zero_info(f"Ray: starting a local instance with {cpus} CPUs for {launch.num_workers} workers")
            # address="local": a new instance even where `ray start` runs on this machine (ray.init() would join it).
            try:
                ray.init(
                    address="local",
                    num_cpus=cpus,
                    num_gpus=launch.num_workers if launch.use_gpu else None,
                    include_dashboard=False,
                )
            except Exception as err:
                # Ray (2.60) gives the new node's raylet a fixed 30 s to register (ray/_private/node.py); a busy
                # machine misses it, and Ray's own words do not say what to do.
                if "timed out during startup" not in str(err):
                    raise
                raise RayStartError(
                    f"Ray's local instance did not start: its raylet must register within Ray's fixed 30 s and this "
                    f"machine was too busy ({err}). Start Ray first (`ray start --head --num-cpus {cpus}`) and pass "
                    "--ray-address auto (RayLaunch(address='auto')), or run where the CPUs are less loaded."
                ) from err
            started = True
        else:
            rank_zero_info(f"Ray: connecting to the cluster at {launch.address}")
            check_reachable(launch.address, launch.connect_timeout_s)
            ray.init(address=launch.address)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` that ``address`` connects to first; ``None`` where only Ray can tell (no cluster known)."""
    if address == "auto":
        # Ray's own order: RAY_ADDRESS, then the cluster `ray start` last recorded on this machine.
        address = os.environ.get("RAY_ADDRESS") or ""
        if not address:
            try:
                address = Path(tempfile.gettempdir(), "ray", "ray_current_cluster").read_text().strip()
            except OSError:
                return None  # ray.init says at once that it found no running instance
    scheme, _, rest = address.rpartition("://")
    host, _, port = rest.rpartition(":")
    default = 10001 if scheme == "ray" else 6379  # the Ray Client server's and the GCS's default ports
    if not host:
        host, port = rest, ""
    try:
        return host.strip("[]"), int(port) if port else default
    except ValueError:
        return None  # not HOST:PORT: let ray.init name what it cannot parse


def check_reachable(address: str, timeout_s: float = 30.0) -> None:
    """Refuse a Ray address where nothing accepts a TCP connection within ``timeout_s``, naming it.

    Raises:
        RayAddressError: the host does not resolve, or nothing listens at its port in time.

    Example::

        check_reachable("10.0.0.5:6379")  # then ray.init(address="10.0.0.5:6379")
    """
    endpoint = _endpoint(address)
    if endpoint is None:
        return
    host, port = endpoint
    deadline = time.monotonic() + timeout_s
    while True:  # bounded by the deadline: a head node still starting gets the time to open its port
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
                return
        except OSError as err:
            if time.monotonic() >= deadline or isinstance(err, socket.gaierror):
                raise RayAddressError(
                    f"--ray-address {address}: nothing answered at {host}:{port} within {timeout_s:g} s ({err})."
                    f" Start the cluster's head there (`ray start --head --port {port}`), check the address and that"
                    " this machine can reach it (firewall), or drop --ray-address to run on a local Ray."
                ) from err
            time.sleep(0.5)


def fit_on_ray(train_fn: Callable[[dict[str, Any]], None], config: dict[str, Any], launch: RayLaunch) -> RayRunResult:
    """Run ``train_fn(config)`` on ``launch.num_workers`` Ray Train workers and wait for it.

    Call it inside :func:`ray_cluster`, or it opens one for the call. ``train_fn`` builds its Trainer with
    :func:`ray_strategy`, :func:`ray_trainer_kwargs` and :func:`report_callback`, and fits from
    :func:`resume_checkpoint`.

    Args:
        train_fn: the per-worker function; Ray pickles it, so it must be importable or picklable by value.
        config: its argument.
        launch: the cluster, worker count and restart budget.

    Returns:
        The last reported metrics and the path of the Lightning checkpoint inside the last reported checkpoint.

    Raises:
        RuntimeError: the run failed after ``launch.max_failures`` restarts; Ray's error is chained.

    Example::

        with ray_cluster(launch):
            result = fit_on_ray(worker, {"args": args}, launch)
    """
    require("ray.train", "--launcher ray")
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    with ray_cluster(launch):
        trainer = TorchTrainer(
            train_fn,
            train_loop_config=config,
            scaling_config=ScalingConfig(
                num_workers=launch.num_workers,
                use_gpu=launch.use_gpu,
                resources_per_worker={"CPU": launch.cpus_per_worker},
            ),
            torch_config=TorchConfig(backend="nccl" if launch.use_gpu else "gloo"),
            run_config=RunConfig(
                name=launch.name,
                storage_path=str(launch.storage_path),
                failure_config=FailureConfig(max_failures=launch.max_failures),
            ),
        )
        try:
            result = trainer.fit()  # Ray Train v2 raises on failure; v1 returns the error in the result
            error = result.error
        except Exception as err:  # noqa: BLE001  (chained below, with the restart budget named)
            error = err
    if error is not None:
        raise RuntimeError(
            f"training on Ray failed ({type(error).__name__}: {error}); Ray restarted the workers up to"
            f" {launch.max_failures} time(s) (--max-failures). The workers' logs above show the first error."
        ) from error
    checkpoint = Path(result.checkpoint.path) / CHECKPOINT_NAME if result.checkpoint is not None else None
    metrics = {k: float(v) for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}
    return RayRunResult(metrics=metrics, checkpoint_path=checkpoint)
