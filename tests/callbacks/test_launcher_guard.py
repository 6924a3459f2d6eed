"""LauncherGuard: no silent single-process training under horovodrun, no ``dp`` under torchrun."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from lightning_mgpu.callbacks import LauncherGuard
from lightning_mgpu.callbacks.factory import callbacks_factory
from tests.helpers.launch import run_command
from tests.helpers.runif import RunIf
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
    with pytest.raises(MisconfigurationException, match=r"one of 2 workers started by horovodrun.*strategy=\"horovod\""):
        LauncherGuard().setup(trainer, None, "fit")  # type: ignore[arg-type]


def test_horovod_under_horovodrun_and_ddp_under_torchrun_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    class Horovod:
        strategy_name = "horovod"

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


SCRIPT = textwrap.dedent(
    """
    import sys
    from tests.helpers.models import ParityModule
    from tests.helpers.trainer import quiet_trainer
    kwargs = {"strategy": sys.argv[1]} if len(sys.argv) > 1 else {}
    quiet_trainer(max_steps=2, use_distributed_sampler=False, **kwargs).fit(ParityModule(global_batch=8, num_samples=16))
    print("TRAINED")
    """
)


@RunIf(horovod=True)
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_horovodrun_without_a_strategy_fails_before_training(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    horovodrun = str(Path(sys.executable).with_name("horovodrun"))
    code, log, _ = run_command([horovodrun, "-np", "2", "--gloo", sys.executable, str(script)], timeout=240, expect_ok=False)
    assert code != 0 and "TRAINED" not in log
    assert 'one of 2 workers started by horovodrun' in log and 'strategy="horovod"' in log, log[-3000:]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_dp_under_torchrun_fails_before_training(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun is not None
    code, log, _ = run_command([torchrun, "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
                                str(script), "dp"], timeout=240, expect_ok=False)
    assert code != 0 and "TRAINED" not in log
    assert "strategy='dp' under torchrun" in log, log[-3000:]


