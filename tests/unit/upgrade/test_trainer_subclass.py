"""A Trainer built under another name: ``cls(...)`` in a classmethod and ``super().__init__(...)`` in ``__init__`` of
a Trainer subclass convert as ``Trainer(...)`` does, and the leftover scan flags their 1.x keywords."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded_result

CLASSMETHOD = """import pytorch_lightning as pl


class RunTrainer(pl.Trainer):
    @classmethod
    def from_settings(klass, settings):
        return klass(
            max_epochs=settings.epochs,
            progress_bar_refresh_rate=0,
            replace_sampler_ddp=False,
            resume_from_checkpoint=settings.restore,
        )
"""

SUPER_INIT = """from typing import Optional

import pytorch_lightning as pl


class Mixin:
    pass


class ExperimentTrainer(Mixin, pl.Trainer):
    def __init__(self, max_epochs: int = 3, replace_sampler_ddp: bool = True, refresh: int = 1, **kwargs):
        kwargs["callbacks"] = kwargs.get("callbacks", [])
        super().__init__(
            max_epochs=max_epochs,
            replace_sampler_ddp=replace_sampler_ddp,
            weights_summary=None,
            **kwargs,
        )


class DeeperTrainer(ExperimentTrainer):
    def __init__(self, **kwargs):
        super(DeeperTrainer, self).__init__(reload_dataloaders_every_epoch=True, **kwargs)
"""


def upgraded(source: str) -> tuple[str, list[str]]:
    result = upgraded_result(source)
    return result.source, [f.rule for f in result.findings]


def test_the_leftover_scan_sees_the_1x_keywords_of_such_calls() -> None:
    assert [what for _, what in unmarked(CLASSMETHOD)] == [
        "Trainer(progress_bar_refresh_rate=...)",
        "Trainer(replace_sampler_ddp=...)",
        "Trainer(resume_from_checkpoint=...)",
    ]
    assert [what for _, what in unmarked(SUPER_INIT)] == [
        "Trainer(replace_sampler_ddp=...)",
        "Trainer(weights_summary=...)",
        "Trainer(reload_dataloaders_every_epoch=...)",
    ]


def test_cls_in_a_classmethod_of_a_trainer_subclass_converts_as_a_trainer_call() -> None:
    out, found = upgraded(CLASSMETHOD)
    assert {"trainer-progress-bar", "trainer-renamed-arg"} <= set(found), out
    assert "enable_progress_bar=False," in out and "use_distributed_sampler=False," in out, out
    # resume_from_checkpoint cannot move to a fit() this method does not call: the built object keeps it.
    assert (
        "return legacy_resume(klass(" in out and "), settings.restore)\n" in out and "resume_from_checkpoint" not in out
    )
    assert unmarked(out) == []
    pl = pytest.importorskip("pytorch_lightning")
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)  # noqa: S102
    settings = type("Settings", (), {"epochs": 2, "restore": None})
    trainer = namespace["RunTrainer"].from_settings(settings)  # type: ignore[attr-defined]
    assert isinstance(trainer, pl.Trainer) and trainer.max_epochs == 2 and trainer.progress_bar_callback is None
    assert trainer._accelerator_connector.use_distributed_sampler is False


def test_super_init_of_a_trainer_subclass_converts_as_a_trainer_call() -> None:
    out, found = upgraded(SUPER_INIT)
    assert "use_distributed_sampler=replace_sampler_ddp," in out and "enable_model_summary=False," in out, out
    assert "reload_dataloaders_every_n_epochs=1, **kwargs)" in out, out
    # The subclass forwards its own **kwargs (its callers' keys): left as they are, no TODO, no translation.
    assert "TODO" not in out and "legacy_trainer_kwargs" not in out and unmarked(out) == [], out
    # Its own parameter keeps its 1.x name: that is the subclass's signature, not a Trainer keyword.
    assert "replace_sampler_ddp: bool = True" in out
    pl = pytest.importorskip("pytorch_lightning")
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)  # noqa: S102
    trainer = namespace["DeeperTrainer"](replace_sampler_ddp=False, logger=False)  # type: ignore[operator]
    assert isinstance(trainer, pl.Trainer) and trainer.max_epochs == 3
    assert trainer._accelerator_connector.use_distributed_sampler is False
    assert trainer.reload_dataloaders_every_n_epochs == 1
    assert not any(type(c).__name__ == "ModelSummary" for c in trainer.callbacks)


@pytest.mark.parametrize(
    "source",
    [
        # cls(...) in a classmethod of a class that is no Trainer
        "class Options:\n    @classmethod\n    def make(cls):\n        return cls(gpus=1)\n",
        # super().__init__(...) outside __init__, and cls(...) outside a classmethod
        "import pytorch_lightning as pl\n\n\nclass T(pl.Trainer):\n    def reset(self, cls):\n"
        "        super().__init__(gpus=1)\n        return cls(gpus=1)\n",
    ],
)
def test_other_calls_named_cls_or_super_init_are_left_alone(source: str) -> None:
    assert upgrade_source(source).source == source
