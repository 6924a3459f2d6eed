"""The 1.x corpus (tests/helpers/upgrade_corpus), converted by ``lightning-mgpu upgrade --write``, trains under the
strategy each script named, on 2 CPU processes (ddp2: one process per node, driving 2 CPU devices).

Each script is run as a user runs it (``python script.py``), so the ``ddp`` launcher re-runs the converted file
itself in its second process: one launch per script, because each is its own program.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lightning_mgpu.cli import main as cli_main
from tests.helpers.launch import run_python
from tests.helpers.runif import RunIf
from tests.helpers.upgrade_corpus import CPU_RUNNABLE

CORPUS = Path(__file__).resolve().parents[2] / "helpers" / "upgrade_corpus"
#: script -> (the strategy class it ends up with, world size)
EXPECTED = {
    "ddp_cpu_processes.py": ("DDPStrategy", 2),
    "sharded_plugin_cpu.py": ("ShardedStrategy", 2),
    "horovod_processes.py": ("HorovodStrategy", 2),
    "ddp2_cpu.py": ("DDP2Strategy", 1),
}
MARKS = {"horovod_processes.py": RunIf(horovod=True).marks, "sharded_plugin_cpu.py": RunIf(fairscale=True).marks}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [pytest.param(n, marks=MARKS.get(n, ()), id=n) for n in sorted(CPU_RUNNABLE)])
def test_a_converted_1x_script_trains_under_the_strategy_it_named(name: str, tmp_path: Path, capsys) -> None:
    script = tmp_path / name
    shutil.copy(CORPUS / name, script)
    assert cli_main(["upgrade", "--write", str(script)]) == 0
    assert "1 of 1 file(s) changed" in capsys.readouterr().err
    out = tmp_path / "out"
    out.mkdir()
    run_python([str(script)], timeout=240, env={"CORPUS_OUT": str(out)}, cwd=tmp_path)
    strategy, world, steps = (out / "done.txt").read_text().split()
    assert (strategy, int(world)) == EXPECTED[name] and int(steps) > 0


@pytest.mark.timeout(300)
@RunIf(neptune=True, fairscale=True)
def test_the_seed_guides_script_converted_trains_under_dp(tmp_path: Path, capsys) -> None:
    """The seed guide's snippets (tests/helpers/upgrade_corpus/seed_guide.py) need no hand edit once converted: no TODO,
    and with ``accelerator="cpu"`` for this GPU-less machine the script trains under ``dp`` (one CPU device)."""
    script = tmp_path / "seed_guide.py"
    shutil.copy(CORPUS / "seed_guide.py", script)
    assert cli_main(["upgrade", "--write", str(script)]) == 0
    assert "0 TODO(s)" in capsys.readouterr().err
    script.write_text(script.read_text().replace('accelerator="gpu"', 'accelerator="cpu"'))
    proc = run_python([str(script)], timeout=240, env={"NEPTUNE_MODE": "debug"}, cwd=tmp_path)
    assert (
        "Traceback" not in proc.stderr and "`Trainer.fit` stopped: `max_epochs=1` reached" in proc.stdout + proc.stderr
    ), proc.stderr[-3000:]
