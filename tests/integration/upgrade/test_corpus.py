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
from tests.helpers.upgrade_corpus import CORPUS

CORPUS_DIR = Path(__file__).resolve().parents[2] / "helpers" / "upgrade_corpus"
RUNNABLE = sorted(name for name, script in CORPUS.items() if script.world)
#: More 1.x shapes of a ddp script on 2 processes: their conversions are checked in tests/unit/upgrade/test_corpus.py,
#: and training them adds a launch each of what resume_and_checkpoint.py (ddp on 2 CPU processes) and the seed guides'
#: script (argparse's Trainer flags) already run; the epoch-end hooks are run against 1.x itself in
#: tests/integration/upgrade/test_equivalence.py.
EXTENDED_RUNS = {
    "argparse_trainer.py",
    "callbacks_1x.py",
    "conditional_strategy.py",
    "config_dict.py",
    "datamodule_argparse.py",
    "ddp_cpu_processes.py",
    "epoch_end_hooks.py",
}
EXTENDED = pytest.mark.extended


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n,
            marks=[*RunIf(**{k: True for k in CORPUS[n].needs}).marks, *([EXTENDED] if n in EXTENDED_RUNS else [])],
            id=n,
        )
        for n in RUNNABLE
    ],
)
def test_a_converted_1x_script_trains_under_the_strategy_it_named(name: str, tmp_path: Path, capsys) -> None:
    """Converted with --write and run with its 1.x command line, the script trains as 1.x ran it on this machine:
    the strategy it named, on the processes it named, in the precision it ran (fp32 stays fp32)."""
    script = tmp_path / name
    shutil.copy(CORPUS_DIR / name, script)
    assert cli_main(["upgrade", "--write", str(script)]) == 0
    assert "1 of 1 file(s) changed" in capsys.readouterr().err
    out = tmp_path / "out"
    out.mkdir()
    run_python([str(script), *CORPUS[name].argv], timeout=240, env={"CORPUS_OUT": str(out)}, cwd=tmp_path)
    strategy, world, steps, precision = (out / "done.txt").read_text().split()
    expected = CORPUS[name]
    assert (strategy, int(world), precision) == (expected.strategy, expected.world, expected.precision)
    assert int(steps) > 0


@pytest.mark.timeout(300)
@RunIf(neptune=True, fairscale=True)
def test_the_seed_guides_script_converted_trains_under_dp(tmp_path: Path, capsys) -> None:
    """The seed guide's snippets (tests/helpers/upgrade_corpus/seed_guide.py) need no hand edit once converted: no TODO,
    and with ``accelerator="cpu"`` for this GPU-less machine the script trains under ``dp`` (one CPU device)."""
    script = tmp_path / "seed_guide.py"
    shutil.copy(CORPUS_DIR / "seed_guide.py", script)
    assert cli_main(["upgrade", "--write", str(script)]) == 0
    assert "0 TODO(s)" in capsys.readouterr().err
    script.write_text(script.read_text().replace('accelerator="gpu"', 'accelerator="cpu"'))
    proc = run_python([str(script)], timeout=240, env={"NEPTUNE_MODE": "debug"}, cwd=tmp_path)
    assert (
        "Traceback" not in proc.stderr and "`Trainer.fit` stopped: `max_epochs=1` reached" in proc.stdout + proc.stderr
    ), proc.stderr[-3000:]
