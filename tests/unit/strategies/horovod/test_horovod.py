"""``strategy="horovod"``: unit checks in this process (Horovod imported, never initialised).

The multi-process runs are in ``test_horovod_integration.py``; the launches it shares:

- ``horovodrun -np 2 --gloo`` running every scenario of ``tests/integration/runners/run_horovod_scenarios.py`` in one
  pair of workers;
- the self-launch, ``Trainer(strategy="horovod", devices=2)`` from a plain ``python``, resuming a checkpoint;
- one plain process resuming that checkpoint under horovod (1 worker), ddp, dp, sharded and no strategy;
- ``horovodrun -np 2 --gloo python examples/train.py --strategy horovod``;
- a self-launch whose rank 1 raises.

References (one process, the global batch) run in this process. Horovod is imported here but never
initialised (``hvd.init()`` runs only in the launched workers).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from lightning_mgpu.utilities.imports import MissingDependencyError
from tests.helpers.runif import RunIf

pytestmark = RunIf(horovod=True).marks

# ----------------------------------------------------------------------------- unit (no launch)


def test_missing_horovod_names_the_build_script(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_mgpu.strategies import HorovodStrategy

    monkeypatch.setitem(sys.modules, "horovod", None)
    with pytest.raises(MissingDependencyError, match="python -m lightning_mgpu build-horovod"):
        HorovodStrategy()


def test_horovod_without_its_torch_extension_names_the_build_script(monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning.pytorch as pl

    import lightning_mgpu  # noqa: F401

    monkeypatch.setitem(sys.modules, "horovod.torch", None)
    with pytest.raises(MissingDependencyError, match=r"PyTorch extension.*python -m lightning_mgpu build-horovod"):
        pl.Trainer(strategy="horovod", accelerator="cpu", devices=1)


def test_launch_with_a_controller_horovod_lacks_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import horovod.torch as hvd
    import lightning.pytorch as pl

    from lightning_mgpu.strategies.horovod.runtime import HorovodControllerError

    assert not hvd.is_initialized()
    # Started by mpirun, but this horovod has no MPI (the real build here is Gloo-only).
    for var, value in {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(var, value)
    if not hvd.mpi_built():
        with pytest.raises(HorovodControllerError, match=r"without MPI.*horovodrun --gloo"):
            pl.Trainer(strategy="horovod", accelerator="cpu", devices=1, logger=False)
    # Started by horovodrun --gloo, with a horovod built without Gloo.
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK")
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    for var, value in {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_CONTROLLER": "gloo"}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(hvd, "gloo_built", lambda: False)
    with pytest.raises(HorovodControllerError, match=r"built without Gloo.*python -m lightning_mgpu build-horovod"):
        pl.Trainer(strategy="horovod", accelerator="cpu", devices=1, logger=False)
    assert not hvd.is_initialized()


def test_self_launch_is_configured_without_initialising_horovod(monkeypatch: pytest.MonkeyPatch) -> None:
    import horovod.torch as hvd
    import lightning.pytorch as pl

    import __main__
    from lightning_mgpu.strategies import HorovodStrategy
    from lightning_mgpu.strategies.horovod.runtime import HorovodControllerError
    from lightning_mgpu.strategies.horovod.script_launcher import HorovodScriptLauncher
    from lightning_mgpu.testing.parity import ParityModule

    # From a script, the default self-launch runs that script again, as ddp does (an xdist worker has no script).
    monkeypatch.setattr(__main__, "__file__", "train.py", raising=False)
    trainer = pl.Trainer(strategy="horovod", accelerator="cpu", devices=2, logger=False, enable_progress_bar=False)
    strategy = trainer.strategy
    assert isinstance(strategy, HorovodStrategy) and isinstance(strategy.launcher, HorovodScriptLauncher)
    assert (trainer.world_size, trainer.global_rank, trainer.num_devices) == (2, 0, 2)
    assert trainer._accelerator_connector.is_distributed  # so Lightning injects DistributedSamplers
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 0}
    # The self-launch runs Gloo workers: a horovod without Gloo is refused before any process starts.
    monkeypatch.setattr(hvd, "gloo_built", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "7")
    with pytest.raises(HorovodControllerError, match="without Gloo"):
        trainer.fit(ParityModule())
    assert not hvd.is_initialized()
    assert not trainer.strategy.launcher.procs, "a worker was started before the refusal"
    # The failed fit tore the strategy down; unlike Lightning's default environment, it leaves os.environ alone.
    assert os.environ["WORLD_SIZE"] == "7"


def test_a_notebook_self_launch_is_refused_naming_the_alternatives(monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning.pytorch as pl

    import __main__
    import lightning_mgpu  # noqa: F401

    monkeypatch.delattr(__main__, "__file__", raising=False)  # what a notebook or `python -c` looks like
    with pytest.raises(
        ValueError,
        match=r"devices=2\) starts its workers by running the script again, and a notebook or `python -c` has no script"
        r".*`horovodrun -np 2 --gloo python train.py`.*strategy='dp' or Lightning's strategy='ddp_notebook'",
    ):
        pl.Trainer(strategy="horovod", accelerator="cpu", devices=2, logger=False)
    # One device needs no launch: a notebook trains on it as usual.
    assert pl.Trainer(strategy="horovod", accelerator="cpu", devices=1, logger=False).strategy.launcher is None


def test_multi_node_without_horovodrun_is_refused() -> None:
    import lightning.pytorch as pl

    import lightning_mgpu  # noqa: F401

    with pytest.raises(ValueError, match=r"num_nodes=2.*horovodrun -np"):
        pl.Trainer(strategy="horovod", accelerator="cpu", devices=2, num_nodes=2)


def test_sync_batchnorm_on_cpu_is_refused_with_the_alternative() -> None:
    from lightning_mgpu.strategies import HorovodStrategy

    strategy = HorovodStrategy(parallel_devices=[torch.device("cpu")])
    with pytest.raises(
        ValueError, match=r"GPUs only \(as torch's SyncBatchNorm does under 'ddp'\)\. Drop sync_batchnorm"
    ):
        strategy._convert_sync_batchnorm(torch.nn.BatchNorm1d(3))


def test_bfloat16_parameters_are_refused_before_the_first_broadcast() -> None:
    """Horovod has no bfloat16 collectives: its broadcast raised mid-setup (the contract tier's bf16-true case)."""
    from horovod.torch import mpi_lib_v2

    from lightning_mgpu.strategies.horovod.strategy import _refuse_bfloat16

    # The premise: the installed Horovod has float32 and float16 broadcasts, and none for bfloat16. When one appears,
    # this fails, and the refusal can go.
    ops = [name for name in dir(mpi_lib_v2) if name.startswith("horovod_torch_broadcast_async_torch_")]
    assert any(op.endswith("HalfTensor") for op in ops) and not any("BFloat16" in op for op in ops), ops
    with pytest.raises(Exception, match=r"precision='bf16-true': Horovod has no bfloat16 collectives.*bf16-mixed"):
        _refuse_bfloat16(torch.nn.Linear(2, 2).to(torch.bfloat16), "bf16-true")
    _refuse_bfloat16(torch.nn.Linear(2, 2), "32-true")  # float32: nothing to refuse


def test_build_info_reports_the_installed_horovod() -> None:
    from lightning_mgpu.strategies.horovod.runtime import build_info

    info = build_info()
    assert info["importable"] and info["version"] == "0.28.1"
    assert info["gloo"] is True  # scripts/build_horovod.sh builds with Gloo
    assert {"mpi", "nccl", "cuda"} <= set(info)


def test_reduce_ops_map_to_horovod_ops() -> None:
    import horovod.torch as hvd
    from torch.distributed import ReduceOp

    from lightning_mgpu.strategies.horovod.runtime import horovod_op

    assert horovod_op(hvd, "mean") == horovod_op(hvd, None) == hvd.Average
    assert horovod_op(hvd, "sum") == horovod_op(hvd, ReduceOp.SUM) == hvd.Sum
    assert horovod_op(hvd, ReduceOp.MAX) == hvd.Max and horovod_op(hvd, "min") == hvd.Min
    with pytest.raises(ValueError, match="not supported by Horovod"):
        horovod_op(hvd, "bitwise_or")


def test_compression_names_resolve_and_others_are_refused() -> None:
    import horovod.torch as hvd

    from lightning_mgpu.strategies import HorovodStrategy

    assert HorovodStrategy(compression="fp16")._compression is hvd.Compression.fp16
    assert HorovodStrategy()._compression is hvd.Compression.none
    assert HorovodStrategy(compression=hvd.Compression.fp16)._compression is hvd.Compression.fp16
    for bad in ("zstd", 16):
        with pytest.raises(ValueError, match="compression"):
            HorovodStrategy(compression=bad)
