"""LauncherGuard: no silent single-process training under horovodrun, no ``dp`` under torchrun.

The tests that launch processes; the in-process ones are in ``tests/unit/callbacks/test_launcher_guard.py``.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.launch import FAILS, run_command
from tests.helpers.runif import RunIf

SCRIPT = textwrap.dedent(
    """
    import sys
    from lightning_mgpu.testing.parity import ParityModule
    from tests.helpers.trainer import quiet_trainer
    kwargs = {"strategy": sys.argv[1]} if len(sys.argv) > 1 else {}
    trainer = quiet_trainer(max_steps=2, use_distributed_sampler=False, **kwargs)
    trainer.fit(ParityModule(global_batch=8, num_samples=16))
    print("TRAINED")
    """
)


@RunIf(horovod=True)
@pytest.mark.timeout(300)
def test_horovodrun_without_a_strategy_fails_before_training(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    horovodrun = str(Path(sys.executable).with_name("horovodrun"))
    code, log, _ = run_command(
        [horovodrun, "-np", "2", "--gloo", sys.executable, str(script)], timeout=240, expect=FAILS
    )
    assert "TRAINED" not in log
    assert "one of 2 workers started by horovodrun" in log and 'strategy="horovod"' in log, log[-3000:]


@pytest.mark.timeout(300)
def test_dp_under_torchrun_fails_before_training(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun is not None
    code, log, _ = run_command(
        [
            torchrun,
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "127.0.0.1:0",
            str(script),
            "dp",
        ],
        timeout=240,
        expect=FAILS,
    )
    assert "TRAINED" not in log
    assert "strategy='dp' under torchrun" in log, log[-3000:]
