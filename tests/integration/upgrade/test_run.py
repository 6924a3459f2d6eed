"""``lightning-mgpu upgrade --jobs N``: files converted in worker processes give the run one process gives (the
files written, the diff, the summary), in the files' order; the processes end with the run."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.run import summary, upgrade_paths  # noqa: E402

HELPERS = Path(__file__).resolve().parents[2] / "helpers"
CORPUS, NOTEBOOKS = HELPERS / "upgrade_corpus", HELPERS / "upgrade_notebooks"


def _project(root: Path) -> Path:
    shutil.copytree(CORPUS, root, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    shutil.copytree(NOTEBOOKS, root / "notebooks", ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (root / "broken.py").write_text("def f(:\n    Trainer(gpus=2)\n")  # does not parse: reported, left as it was
    (root / "latin1.py").write_bytes(b"# caf\xe9\nTrainer(gpus=1)\n")  # cannot be read as UTF-8
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("write", [False, True], ids=["diff", "write"])
def test_two_processes_give_the_run_one_gives(tmp_path: Path, write: bool) -> None:
    one, two = _project(tmp_path / "one"), _project(tmp_path / "two")
    out_one, out_two = io.StringIO(), io.StringIO()
    report_one = upgrade_paths([one], write=write, out=out_one, jobs=1)
    report_two = upgrade_paths([two], write=write, out=out_two, jobs=2)
    assert report_one.scanned == report_two.scanned > 20
    assert len(report_one.changed) > 10 and report_one.unparsable  # the comparison covers changes and refusals
    assert out_two.getvalue() == out_one.getvalue().replace(str(one), str(two))
    assert summary(report_two, write) == summary(report_one, write).replace(str(one), str(two))
    assert _files(two) == _files(one)
