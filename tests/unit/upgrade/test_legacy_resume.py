"""``resume_from_checkpoint=X`` on a Trainer whose fit the tool cannot follow (returned from a function, built by a
classmethod, handed to a call): ``legacy_resume(Trainer(...), X)`` (rule ``trainer-resume``), and
:func:`lightning_mgpu.upgrade.legacy_resume.legacy_resume` against 1.x's semantics (1.5-1.9: the first fit without
a ``ckpt_path`` of its own resumes, once; validate/test/predict and the tuner never read it)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from lightning_mgpu.upgrade.legacy_resume import legacy_resume  # noqa: E402
from lightning_mgpu.upgrade.transform import upgrade_source  # noqa: E402
from tests.helpers.tiny import tiny_module  # noqa: E402
from tests.helpers.trainer import quiet_trainer  # noqa: E402
from tests.helpers.upgrade_check import upgraded  # noqa: E402

IMPORT = "from lightning_mgpu.upgrade.legacy_resume import legacy_resume\n"

FACTORY = """\
import pytorch_lightning as pl


def build_runner(root, epochs, warm_start=None):
    runner = pl.Trainer(
        max_epochs=epochs,
        default_root_dir=root,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        resume_from_checkpoint=warm_start,
    )
    return runner
"""

CLASSMETHOD = """\
import pytorch_lightning as pl


class Runner(pl.Trainer):
    @classmethod
    def from_settings(cls, settings):
        return cls(max_epochs=settings.epochs, resume_from_checkpoint=settings.warm_start)
"""

HANDED_ON = """\
from pytorch_lightning import Trainer


def go(model, loader, warm_start, train_with):
    train_with(Trainer(max_epochs=3, resume_from_checkpoint=warm_start), model, loader)
"""

SUPER_INIT = """\
from pytorch_lightning import Trainer


class Runner(Trainer):
    def __init__(self, warm_start, **kwargs):
        super().__init__(resume_from_checkpoint=warm_start, **kwargs)
"""


def test_a_returned_trainer_keeps_its_checkpoint() -> None:
    out = upgraded(FACTORY, no_todo=True, no_unmarked=True)
    assert IMPORT in out and "    runner = legacy_resume(pl.Trainer(\n" in out and "    ), warm_start)\n" in out
    assert "resume_from_checkpoint" not in out


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (CLASSMETHOD, "return legacy_resume(cls(max_epochs=settings.epochs), settings.warm_start)"),
        (HANDED_ON, "train_with(legacy_resume(Trainer(max_epochs=3), warm_start), model, loader)"),
    ],
)
def test_a_classmethods_or_a_handed_trainer_keeps_its_checkpoint(source: str, expected: str) -> None:
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert expected in out and IMPORT in out


def test_super_init_keeps_the_todo() -> None:
    # super().__init__ returns None: there is no object to wrap, and a person passes the checkpoint on.
    out = upgrade_source(SUPER_INIT).source
    assert "TODO(lightning-mgpu:trainer-resume)" in out and "legacy_resume" not in out
    assert upgrade_source(out).source == out


# -- the helper, on 2.x, against 1.x's semantics -------------------------------------------------------------------


class _CountBatches:
    """A callback that counts the training batches a fit runs (its own: not the step a checkpoint restores)."""

    @staticmethod
    def make() -> Any:
        from pytorch_lightning import Callback

        class Counter(Callback):
            def __init__(self) -> None:
                self.batches = 0

            def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
                self.batches += 1

        return Counter()


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(12, 3)), batch_size=4)  # three batches an epoch


@pytest.fixture
def one_epoch(tmp_path: Path) -> str:
    """A checkpoint after one epoch (three steps) of the tiny module."""
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, default_root_dir=tmp_path)
    trainer.fit(tiny_module("pytorch_lightning"), _loader())
    path = os.path.join(tmp_path, "one.ckpt")
    trainer.save_checkpoint(path)
    return path


def _converted_factory() -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(upgraded(FACTORY, no_todo=True, no_unmarked=True), "<converted>", "exec"), namespace)  # noqa: S102
    return namespace["build_runner"]


def test_the_callers_fit_resumes_once_as_1x(tmp_path: Path, one_epoch: str) -> None:
    build_runner = _converted_factory()
    runner = build_runner(tmp_path / "a", 3, warm_start=one_epoch)
    counter = _CountBatches.make()
    runner.callbacks.append(counter)
    runner.fit(tiny_module("pytorch_lightning"), _loader())
    assert counter.batches == 6 and runner.global_step == 9  # epochs 2 and 3 on top of the checkpoint's first
    # A second fit of the same Trainer: 1.4-1.9 had forgotten the checkpoint (resume_end), so it goes on from here.
    runner.fit_loop.max_epochs = 4
    runner.fit(runner.lightning_module, _loader())
    assert counter.batches == 9 and runner.global_step == 12
    fresh = build_runner(tmp_path / "b", 3)  # no checkpoint: 1.x's None, no resume
    counter = _CountBatches.make()
    fresh.callbacks.append(counter)
    fresh.fit(tiny_module("pytorch_lightning"), _loader())
    assert counter.batches == 9 and "fit" not in vars(fresh)


def test_a_fit_given_its_own_checkpoint_leaves_the_resume_for_the_next(tmp_path: Path, one_epoch: str) -> None:
    trainer = legacy_resume(quiet_trainer("pytorch_lightning", max_epochs=1, default_root_dir=tmp_path), "absent.ckpt")
    model = tiny_module("pytorch_lightning")
    trainer.fit(model, _loader(), ckpt_path=one_epoch)  # 1.5-1.9: ckpt_path or resume_from_checkpoint
    assert trainer.global_step == 3 and "fit" in vars(trainer)  # one_epoch held max_epochs=1 done: nothing ran


def test_the_tuners_fit_does_not_read_it(tmp_path: Path, one_epoch: str) -> None:
    from pytorch_lightning.tuner import Tuner

    trainer = legacy_resume(quiet_trainer("pytorch_lightning", max_epochs=2, default_root_dir=tmp_path), one_epoch)
    model = tiny_module("pytorch_lightning")
    Tuner(trainer).lr_find(model, train_dataloaders=_loader(), num_training=4)
    assert "fit" in vars(trainer)  # still pending: 1.x's tuner ran its own loop
    counter = _CountBatches.make()
    trainer.callbacks.append(counter)
    trainer.fit(model, _loader())
    assert counter.batches == 3 and trainer.global_step == 6 and "fit" not in vars(trainer)


@pytest.mark.parametrize("empty", [None, ""])
def test_no_checkpoint_is_no_resume(empty: str | None) -> None:
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1)
    assert legacy_resume(trainer, empty) is trainer and "fit" not in vars(trainer)


def test_the_trainer_still_pickles(tmp_path: Path) -> None:
    # A spawn launcher pickles the Trainer: the pending resume must not stop it.
    trainer = legacy_resume(quiet_trainer("pytorch_lightning", max_epochs=1, default_root_dir=tmp_path), "x.ckpt")
    again = pickle.loads(pickle.dumps(trainer))  # noqa: S301
    assert again.fit.checkpoint_path == "x.ckpt" and again.fit.trainer is again
