"""Rule ``trainer-foreign-class``: a class named like a Trainer that the tool does not rewrite as Lightning's (a
library's subclass, such as an active-learning package's trainer, imported from elsewhere), called with keywords only
a 1.x Lightning Trainer took. Which Trainer it builds only its package says: a TODO names the keys and the call stays;
nothing is left unmarked (the sample-8 shape: the scan found ``gpus=``/``distributed_backend=`` with no TODO)."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.upgrade_check import upgraded_result

LIBRARY_TRAINER = """import torch
from labelkit.lightning import LabellingTrainer


def run(params, model, pool):
    backend = "dp" if params.gpus > 1 else None
    trainer = LabellingTrainer(
        pool=pool,
        max_epochs=params.epochs,
        gpus=params.gpus,
        distributed_backend=backend,
    )
    trainer.fit(model)
"""

PLAIN_KEYWORDS = """from labelkit.lightning import LabellingTrainer

trainer = LabellingTrainer(pool=[], max_epochs=3)
"""


def test_a_library_trainer_given_1x_keys_gets_a_todo_and_keeps_its_call() -> None:
    result = upgraded_result(LIBRARY_TRAINER, no_unmarked=True)
    out = result.source
    assert "TODO(lightning-mgpu:trainer-foreign-class): LabellingTrainer: 1.x Trainer keys gpus," in out
    assert "gpus=params.gpus," in out and "distributed_backend=backend," in out  # left as written
    assert [f.rule for f in result.todos] == ["trainer-foreign-class"]


def test_without_1x_keys_it_is_left_alone() -> None:
    result = upgraded_result(PLAIN_KEYWORDS, no_todo=True, no_unmarked=True)
    assert result.source == PLAIN_KEYWORDS and unmarked(result.source) == []
