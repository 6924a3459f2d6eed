"""LauncherGuard: no silent single-process training under horovodrun, no ``dp`` under torchrun.

The in-process tests; the ones that launch processes are in ``tests/integration/callbacks/test_launcher_guard.py``.
"""

from __future__ import annotations

import pytest
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from lightning_mgpu.callbacks import LauncherGuard
from lightning_mgpu.callbacks.factory import callbacks_factory
from tests.helpers.trainer import quiet_trainer


def test_no_guard_outside_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HOROVOD_SIZE", "HOROVOD_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    assert callbacks_factory() == []
    assert not any(isinstance(c, LauncherGuard) for c in quiet_trainer().callbacks)


def test_lightning_loads_the_guard_through_its_entry_point_under_horovodrun(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    monkeypatch.setenv("HOROVOD_RANK", "0")
    trainer = quiet_trainer(max_steps=1)  # no strategy: Lightning picks a single device
    assert any(isinstance(c, LauncherGuard) for c in trainer.callbacks)
    with pytest.raises(
        MisconfigurationException, match=r"one of 2 workers started by horovodrun.*strategy=\"horovod\""
    ):
        LauncherGuard().setup(trainer, None, "fit")  # type: ignore[arg-type]


def test_horovod_under_horovodrun_and_ddp_under_torchrun_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    class Horovod:
        strategy_name = "horovod"
        runs_under_horovodrun = True  # the capability the guard asks (lightning_mgpu/utilities/capabilities.py)

    class Fake:
        def __init__(self, strategy: object) -> None:
            self.strategy, self.world_size = strategy, 2

    monkeypatch.setenv("HOROVOD_SIZE", "2")
    monkeypatch.setenv("HOROVOD_RANK", "1")
    LauncherGuard().setup(Fake(Horovod()), None, "fit")  # type: ignore[arg-type]
    monkeypatch.delenv("HOROVOD_SIZE")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    LauncherGuard().setup(Fake(object()), None, "fit")  # type: ignore[arg-type]


def test_dp_under_torchrun_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    trainer = quiet_trainer(strategy="dp", max_steps=1)
    with pytest.raises(MisconfigurationException, match=r"strategy='dp' under torchrun.*strategy=\"ddp\""):
        LauncherGuard().setup(trainer, None, "fit")  # type: ignore[arg-type]


def test_a_strategy_that_loads_the_node_batch_needs_one_torchrun_process_per_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked by capability, not by name: ddp2 (one process per node, driving the node's devices) is refused with several
    torchrun processes per node and passes with one."""

    class NodeBatch:
        strategy_name = "ddp2"
        loads_node_batch = True

    class Fake:
        def __init__(self, strategy: object) -> None:
            self.strategy, self.world_size = strategy, 2

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(MisconfigurationException, match=r"strategy='ddp2' under torchrun.*--nproc-per-node 1"):
        LauncherGuard().setup(Fake(NodeBatch()), None, "fit")  # type: ignore[arg-type]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    LauncherGuard().setup(Fake(NodeBatch()), None, "fit")  # type: ignore[arg-type]
