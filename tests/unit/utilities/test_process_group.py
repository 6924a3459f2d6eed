"""``data_parallel_rank_and_size``: the data-parallel rank and size, from torch.distributed or Horovod.

The in-process tests; the ones that launch processes are in ``tests/integration/utilities/test_process_group.py``.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from lightning_mgpu.data.loader import ResumableDistributedSampler, resumable_loader
from lightning_mgpu.utilities.process_group import data_parallel_rank_and_size
from tests.helpers.runif import RunIf


@pytest.fixture
def group_of_one(tmp_path: Path) -> Iterator[None]:
    """A torch.distributed group of this one process (what Lightning's ddp builds on one device)."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        if dist.is_initialized():  # a test may have left the group itself
            dist.destroy_process_group()


def test_one_process_is_not_a_group() -> None:
    assert not dist.is_initialized()
    assert data_parallel_rank_and_size() is None


def test_a_group_of_one_process_is_a_job(group_of_one: None) -> None:
    """ddp on one device: Lightning still swaps a plain DistributedSampler into a shuffling loader, and that one replays
    epoch 0's order after a resume (found on a GPU, 2026-11-27), so the loader must bring its own resumable one."""
    assert data_parallel_rank_and_size() == (0, 1)
    loader = resumable_loader(list(range(10)), batch_size=2, shuffle=True, seed=3)
    assert isinstance(loader.sampler, ResumableDistributedSampler)
    assert sorted(loader.sampler) == list(range(10))


def test_the_group_is_destroyed_after_success_and_kept_after_a_failure(
    group_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_mgpu.utilities import process_group

    # Ending on an uncaught exception (Python sets sys.last_value before the exit handlers): other ranks may be inside
    # a collective, so the group stays.
    monkeypatch.setattr("sys.last_value", RuntimeError("rank 0 failed"), raising=False)
    assert not process_group.destroy_process_group_if_done() and dist.is_initialized()
    monkeypatch.delattr("sys.last_value")
    monkeypatch.setitem(process_group._state, "failed", True)  # marked by a strategy's or CleanExit's on_exception
    assert not process_group.destroy_process_group_if_done() and dist.is_initialized()
    monkeypatch.setitem(process_group._state, "failed", False)
    assert process_group.destroy_process_group_if_done() and not dist.is_initialized()


def test_every_trainer_has_a_process_that_ends_well_leave_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's own ddp never destroys the group; the callbacks_factory entry point registers the exit handler.
    import atexit

    import lightning.pytorch as pl

    from lightning_mgpu.utilities import process_group

    registered = []
    monkeypatch.setitem(process_group._state, "registered", False)
    monkeypatch.setattr(atexit, "register", registered.append)
    pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)  # the entry point runs here
    assert registered == [process_group.destroy_process_group_if_done]


@dataclass(frozen=True)
class _FrozenInfo:
    group: object


@pytest.fixture
def succeeded(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process counts as successful, whatever an earlier in-process test marked (or pytest's sys.last_value)."""
    from lightning_mgpu.utilities import process_group

    monkeypatch.setitem(process_group._state, "failed", False)
    monkeypatch.delattr("sys.last_value", raising=False)


def test_what_still_holds_a_destroyed_group_lets_go_so_that_gloo_ends_before_interpreter_exit(
    group_of_one: None, succeeded: None
) -> None:
    """``destroy_process_group()`` only unregisters a gloo group; while anything holds it, its threads live on and are
    torn down during interpreter finalization, which aborts now and then ("terminate called without an active
    exception" after a finished fit). Each holder below is one the sharded engines were found to leave."""
    from lightning_mgpu.utilities import process_group

    world = dist.group.WORLD
    assert world is not None
    alive = weakref.ref(world)

    class Holder:  # attributes stored inline (Python 3.11+): the object itself refers to the group
        pass

    optimizer = Holder()
    optimizer.group = world  # FairScale's OSS.group, torch's ZeroRedundancyOptimizer.process_group
    frozen = _FrozenInfo(world)  # FSDP2's mesh info is a dataclass; a frozen one refuses setattr
    mesh = Holder()
    mesh.registry = {"0": world}  # FSDP2's DeviceMesh._pg_registry
    assert not gc.is_tracked(mesh.registry)  # it holds only a C++ object, so gc.get_objects() does not list it

    def broadcast(obj: object, group: object = world) -> object:  # FairScale's oss._broadcast_object, imported late
        return obj

    # A collection untracks a tuple that holds only untracked objects: broadcast's defaults from now on, and not yet
    # gather's (made below). Which of the two FairScale's defaults are depends on when a collection last ran.
    gc.collect()

    def gather(obj: object, group: object = world, device: torch.device = torch.device("cpu")) -> object:
        return obj

    assert not gc.is_tracked(broadcast.__defaults__) and gc.is_tracked(gather.__defaults__)
    hook = _closure_over(world)  # a closure's variable (a cell), as a hook registered with the group would hold

    del world
    assert process_group.destroy_process_group_if_done()
    assert alive() is None
    assert optimizer.group is None and frozen.group is None and mesh.registry == {"0": None}
    assert broadcast.__defaults__ == (None,) and gather.__defaults__ == (None, torch.device("cpu")) and hook() is None


def _closure_over(group: object) -> Callable[[], object]:
    return lambda: group


@pytest.mark.parametrize(
    "strategy",
    [pytest.param("sharded", marks=RunIf(fairscale=True).marks), "sharded_zero", "sharded_fsdp2"],
)
def test_a_sharded_engine_leaves_no_group_alive_after_it_is_destroyed(strategy: str, succeeded: None) -> None:
    """The cause of the abort at exit, found in a FairScale script: every sharded engine kept the group alive after
    ``destroy_process_group()`` (the optimizer, FairScale's default argument, FSDP2's DeviceMesh)."""
    from lightning_mgpu.testing import ParityModule
    from lightning_mgpu.utilities import process_group
    from tests.helpers.trainer import quiet_trainer

    quiet_trainer(strategy=strategy, max_steps=2).fit(ParityModule())
    groups = [weakref.ref(pg) for pg in dist.distributed_c10d._world.pg_map]
    assert groups and process_group.destroy_process_group_if_done()
    assert [ref() for ref in groups] == [None] * len(groups)


@pytest.mark.parametrize(
    ("backend", "device", "version", "expected"),
    [
        ("nccl", torch.device("cuda", 1), "2.11.0+cu130", torch.device("cuda", 1)),
        ("nccl-legacy", torch.device("cuda", 0), "2.15.0", torch.device("cuda", 0)),  # torch 2.15's old NCCL
        ("cpu:gloo,cuda:nccl", torch.device("cuda", 3), "2.7.1", torch.device("cuda", 3)),
        ("nccl", torch.device("cuda", 1), "2.7.0", None),  # pytorch#153960: eager init hung at random
        ("nccl", torch.device("cuda", 1), "2.6.0+cu124", None),
        ("gloo", torch.device("cuda", 1), "2.15.0", None),  # gloo binds nothing
        ("gloo", torch.device("cpu"), "2.15.0", None),
        ("nccl", None, "2.15.0", None),
    ],
)
def test_init_device_id_is_given_for_nccl_where_safe(
    backend: str, device: torch.device | None, version: str, expected: torch.device | None, monkeypatch
) -> None:
    from lightning_mgpu.utilities import process_group

    monkeypatch.setattr(process_group.torch, "__version__", version)
    assert process_group.init_device_id(backend, device) == expected


def test_torch_release_reads_local_versions(monkeypatch) -> None:
    from lightning_mgpu.utilities import process_group

    for version, release in (("2.7.1+cu126", (2, 7, 1)), ("2.15.0.dev20261001", (2, 15, 0)), ("3.0", (3, 0, 0))):
        monkeypatch.setattr(process_group.torch, "__version__", version)
        assert process_group.torch_release() == release


class _LazyMapping(dict):
    """Like transformers' lazy auto-mappings: ``items()`` computes, and fails for an entry it cannot import."""

    def items(self):  # type: ignore[override]
        raise ValueError("Could not find a model class")


class _Warns:
    """Like ``torch.distributed.reduce_op``: every attribute read warns that it is deprecated."""

    def __getattribute__(self, name: str) -> object:
        import warnings

        warnings.warn("deprecated", FutureWarning, stacklevel=2)
        return object.__getattribute__(self, name)


def test_release_drops_every_holder_without_running_their_code(tmp_path: Path) -> None:
    """At exit the release walks every object of the process: a dict subclass that computes its items, or an object
    that warns on attribute reads, must neither stop it (an atexit traceback on a machine with transformers) nor
    warn; the references they hold are dropped all the same."""
    import warnings

    from lightning_mgpu.utilities.process_group import release_destroyed_groups

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    group = dist.group.WORLD
    lazy, warns = _LazyMapping(pg=group, other=1), _Warns()
    object.__setattr__(warns, "pg", group)
    refs = [weakref.ref(group)]
    dist.destroy_process_group()
    del group
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        released = release_destroyed_groups(refs)
    assert released >= 2
    assert dict.__getitem__(lazy, "pg") is None and dict.__getitem__(lazy, "other") == 1
    assert object.__getattribute__(warns, "pg") is None
