"""Each script of tests/helpers/upgrade_equivalence, converted by ``lightning-mgpu upgrade --write``, computes what its
1.x original computed under Lightning 1.9.5 or 1.6.5 (issue 54).

The 1.x side is not run here: its figures (the loss of every step, a digest of the final weights, what else the
script records) are stored in ``reference_1x.json`` by ``scripts/check_upgrade_equivalence.sh --fixture``, which runs
both sides in the 1.x reference venvs; ``<script>_1x.pt`` is the checkpoint 1.9.5 wrote that a ``resume_*`` script
continues from. One launch per script, every script in the default tier.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.upgrade_equivalence import CASES, FIXTURE, SCRIPTS, compare, figures, verdict
from lightning_mgpu.cli import main as cli_main
from tests.helpers.launch import run_python

STORED = json.loads(FIXTURE.read_text())
RUN = sorted(name for name, case in CASES.items() if case.runs and name in STORED)


def test_every_runnable_script_has_stored_1x_figures() -> None:
    assert {p.name for p in SCRIPTS.glob("*.py") if not p.name.startswith("_")} == set(CASES)
    assert {name for name, case in CASES.items() if case.runs} <= set(STORED)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.extended] if CASES[n].extended else [], id=n) for n in RUN]
)
def test_the_converted_script_computes_what_1x_computed(name: str, tmp_path: Path, capsys) -> None:
    """Equal within 1e-6 relative, or differing only where the case's named difference says (and its first loss,
    before the difference can act, equal)."""
    case, reference = CASES[name], STORED[name]
    script = tmp_path / name
    shutil.copy(SCRIPTS / name, script)
    assert cli_main(["upgrade", "--write", str(script)]) == 0
    capsys.readouterr()
    ckpt = tmp_path / "1x.ckpt"
    if case.prepare:
        shutil.copy(SCRIPTS / (name.removesuffix(".py") + "_1x.pt"), ckpt)
    out = tmp_path / "2x.json"
    argv = [a.format(ckpt=ckpt) for a in case.argv]
    run_python([str(script), *argv], timeout=240, env={"EQUIV_OUT": str(out)}, cwd=tmp_path)
    converted = figures(json.loads(out.read_text()))
    compared = compare(reference, converted)
    assert verdict(case, compared) in ("equal", "named difference"), compared
    if case.first_equal:
        assert compare({"first": reference["losses"][0]}, {"first": converted["losses"][0]}) == {"first": "equal"}
    if case.difference:
        assert verdict(case, compared) == "named difference", f"{case.difference} no longer shows: {compared}"
