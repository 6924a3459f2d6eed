"""``resume_from_checkpoint=`` moved to ``fit(ckpt_path=)`` (rule ``trainer-resume``) where one name is built as a
Trainer more than once in a scope and only some constructions resume: each construction gets a variable beside it
(its checkpoint, or None), and the fits pass that variable."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.tiny import tiny_module
from tests.helpers.upgrade_check import upgraded

BRANCHES = """import os
import pytorch_lightning as pl


def run(model, loader, root, resume_dir=None, frozen=False):
    if resume_dir is not None:
        if frozen:
            runner = pl.Trainer(max_epochs=2, default_root_dir=root, logger=False, enable_progress_bar=False)
        else:
            last = os.path.join(resume_dir, "last.ckpt")
            runner = pl.Trainer(
                max_epochs=2, default_root_dir=root, logger=False, enable_progress_bar=False,
                resume_from_checkpoint=last,
            )
    else:
        runner = pl.Trainer(max_epochs=1, default_root_dir=root, logger=False, enable_progress_bar=False)
    runner.fit(model, loader)
    return runner
"""


def test_only_the_construction_that_resumed_passes_its_checkpoint() -> None:
    out = upgraded(BRANCHES, no_todo=True, no_unmarked=True)
    assert "resume_from_checkpoint" not in out
    assert out.count("resume_ckpt_path = None\n") == 2 and out.count("resume_ckpt_path = last\n") == 1, out
    assert "runner.fit(model, loader, ckpt_path=resume_ckpt_path)" in out
    # Beside its construction, at its indentation.
    assert "resume_from_checkpoint" not in out and "            )\n            resume_ckpt_path = last\n" in out, out


def test_the_converted_branches_resume_as_1x_did(tmp_path) -> None:
    """Run on Lightning 2.x: the first run trains one epoch from scratch (before the fix its fit named ``last``,
    unbound there: NameError); the resumed run continues from that checkpoint; the frozen one starts again."""
    pytest.importorskip("pytorch_lightning")
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict[str, object] = {}
    exec(compile(upgraded(BRANCHES, no_todo=True, no_unmarked=True), "<converted>", "exec"), namespace)  # noqa: S102
    run = namespace["run"]
    loader = DataLoader(TensorDataset(torch.randn(12, 3)), batch_size=4)
    first = run(tiny_module("pytorch_lightning"), loader, tmp_path / "a")  # type: ignore[operator]
    assert first.global_step == 3
    first.save_checkpoint(tmp_path / "last.ckpt")
    resumed = run(tiny_module("pytorch_lightning"), loader, tmp_path / "b", resume_dir=str(tmp_path))  # type: ignore[operator]
    assert resumed.global_step == 6 and resumed.current_epoch == 2  # one more epoch on top of the first
    fresh = run(tiny_module("pytorch_lightning"), loader, tmp_path / "c", resume_dir=str(tmp_path), frozen=True)  # type: ignore[operator]
    assert fresh.global_step == 6 and fresh.current_epoch == 2  # two epochs of its own: no checkpoint read


def test_the_fresh_variable_does_not_clash_with_the_files_names() -> None:
    source = BRANCHES.replace("root, resume_dir=None", "root, resume_ckpt_path=0, resume_dir=None")
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert "resume_ckpt_path_2 = last\n" in out and "ckpt_path=resume_ckpt_path_2)" in out, out


@pytest.mark.parametrize(
    "source",
    [
        # The name is also given something that is not a Trainer: which one fit() runs on, the tool cannot tell.
        "def go(m, p, t0):\n    tr = t0\n    if p:\n        tr = Trainer(resume_from_checkpoint=p)\n    tr.fit(m)\n",
        # A construction that shares its line: the variable's statement has nowhere to go.
        "def go(m, p):\n    if p: tr = Trainer(resume_from_checkpoint=p)\n    else:\n"
        "        tr = Trainer()\n    tr.fit(m)\n",
        # No fit in this function (the trainer is returned): nothing to move it to.
        "def go(p):\n    tr = Trainer()\n    if p:\n        tr = Trainer(resume_from_checkpoint=p)\n    return tr\n",
    ],
)
def test_where_the_fits_cannot_be_followed_the_trainer_keeps_its_checkpoint(source: str) -> None:
    # legacy_resume(Trainer(...), p): the object's next fit resumes, wherever it is (test_legacy_resume.py).
    out = upgraded(source)
    assert "TODO(lightning-mgpu:trainer-resume)" not in out and "ckpt_path=" not in out, out
    assert "legacy_resume(Trainer(resume_from_checkpoint" not in out and "legacy_resume(Trainer(), p)" in out, out


def test_one_construction_still_moves_its_value_to_the_fits() -> None:
    source = "def go(m, p):\n    tr = Trainer(resume_from_checkpoint=p)\n    tr.fit(m)\n"
    assert (
        upgraded(source, no_todo=True, no_unmarked=True)
        == "def go(m, p):\n    tr = Trainer()\n    tr.fit(m, ckpt_path=p)\n"
    )
