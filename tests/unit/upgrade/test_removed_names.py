"""``lightning_mgpu.upgrade.removed_names``: trainer.root_gpu and trainer.training_type_plugin (rules
``trainer-root-gpu``, ``trainer-training-type-plugin``), EPOCH_OUTPUT (``epoch-output-type``) and TestTubeLogger
(``test-tube-logger-args``)."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

CALLBACK = """import time
import torch
import pytorch_lightning as pl
from pytorch_lightning.utilities.types import EPOCH_OUTPUT, STEP_OUTPUT


class CUDACallback(pl.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        torch.cuda.reset_peak_memory_stats(trainer.root_gpu)
        self.start_time = time.time()

    def on_train_epoch_end(self, trainer, pl_module):
        max_memory = torch.cuda.max_memory_allocated(trainer.root_gpu) / 2**20
        max_memory = trainer.training_type_plugin.reduce(max_memory)
        if self.root_gpu is None:  # not a trainer's attribute: kept
            pass


class Model(pl.LightningModule):
    def _aggregate(self, outputs: EPOCH_OUTPUT) -> float:
        return sum(o["loss"] for o in outputs)

    def uses_the_plugin(self):
        return isinstance(self.trainer.training_type_plugin, pl.strategies.DDPStrategy)
"""


def test_removed_trainer_attributes_and_epoch_output() -> None:
    out = upgraded(CALLBACK)
    lines = [line.strip() for line in out.splitlines()]
    for expected in (
        "from pytorch_lightning.utilities.types import STEP_OUTPUT",
        "torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device.index)",
        "max_memory = torch.cuda.max_memory_allocated(trainer.strategy.root_device.index) / 2**20",
        "max_memory = trainer.strategy.reduce(max_memory)",
        "if self.root_gpu is None:  # not a trainer's attribute: kept",
        "def _aggregate(self, outputs: list[STEP_OUTPUT]) -> float:",
        "return isinstance(self.trainer.strategy, pl.strategies.DDPStrategy)",
    ):
        assert expected in lines, (expected, out)
    assert "EPOCH_OUTPUT" not in out and unmarked(out) == []


def test_the_replacements_exist_on_lightning_2() -> None:
    """What the rewrite writes resolves on this Lightning: STEP_OUTPUT, and a CPU trainer's root device index (None,
    as 1.x's root_gpu was off the GPU)."""
    types = pytest.importorskip("pytorch_lightning.utilities.types")
    assert hasattr(types, "STEP_OUTPUT") and not hasattr(types, "EPOCH_OUTPUT")
    trainer = quiet_trainer("pytorch_lightning")  # pytorch_lightning's quiet Trainer, on one CPU device
    assert trainer.strategy.root_device.index is None
    assert not hasattr(trainer, "root_gpu") and not hasattr(trainer, "training_type_plugin")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('TestTubeLogger("logs", description="run 1", debug=False)', 'TensorBoardLogger("logs", name="default")'),
        (
            'TestTubeLogger(save_dir="logs", name="exp", version=3)',
            'TensorBoardLogger(save_dir="logs", name="exp", version=3)',
        ),
        ('TestTubeLogger("logs", "exp", create_git_tag=True)', 'TensorBoardLogger("logs", "exp")'),
        (
            'TestTubeLogger(\n    save_dir="logs",\n    create_git_tag=True,\n)',
            'TensorBoardLogger(\n    save_dir="logs",\n    name="default",\n)',
        ),
    ],
)
def test_test_tube_logger_becomes_tensorboard(before: str, after: str) -> None:
    source = f"from pytorch_lightning.loggers import TestTubeLogger\nlogger = {before}\n"
    out = upgraded(source)
    assert out == f"from pytorch_lightning.loggers import TensorBoardLogger\nlogger = {after}\n"


def test_test_tube_through_an_attribute_and_a_positional_description() -> None:
    source = (
        "import pytorch_lightning as pl\n"
        'a = pl.loggers.TestTubeLogger(save_dir="logs", debug=True)\n'
        'b = pl.loggers.TestTubeLogger("logs", "exp", "a description")\n'
        "handlers = {pl.loggers.TestTubeLogger: 1}\n"
    )
    out = upgraded(source)
    assert 'a = pl.loggers.TensorBoardLogger(save_dir="logs", name="default")' in out
    assert "test-tube-logger): TestTubeLogger was removed" in out  # b: test-tube's description, positionally
    assert "handlers = {pl.loggers.TensorBoardLogger: 1}" in out
    assert "TestTubeLogger" not in out.replace("TODO(lightning-mgpu:test-tube-logger): TestTubeLogger", "")


ISINSTANCE = """from pytorch_lightning.strategies import DDPSpawnStrategy, DDPStrategy
from pytorch_lightning.plugins import DDPPlugin, DDPSpawnPlugin


def is_ddp(trainer):
    new = isinstance(trainer.strategy, (DDPStrategy, DDPSpawnStrategy))
    old = isinstance(trainer.training_type_plugin, (DDPPlugin, DDPSpawnPlugin))
    alone = isinstance(trainer.strategy, DDPSpawnStrategy)
    return new, old, alone
"""


def test_the_spawn_class_goes_from_an_isinstance_tuple_that_holds_ddp() -> None:
    """Rule ``ddp-spawn-isinstance``: 2.x's DDPStrategy is ddp and ddp_spawn; alone, the check becomes
    legacy_is_ddp_spawn (rule spawn-isinstance: 2.x has no class that means spawn only)."""
    result = upgrade_source(ISINSTANCE)
    out = result.source
    assert upgrade_source(out).source == out
    lines = [line.strip() for line in out.splitlines()]
    assert "new = isinstance(trainer.strategy, (DDPStrategy,))" in lines, out
    assert "old = isinstance(trainer.strategy, (DDPStrategy,))" in lines, out
    assert "alone = legacy_is_ddp_spawn(trainer.strategy)" in lines
    assert [f.rule for f in result.findings].count("ddp-spawn-isinstance") == 2
    assert rules.todo_text("spawn-class-use", name="DDPSpawnStrategy") not in out
    assert not unmarked(out)


def test_a_test_tube_logger_the_file_never_imports_is_marked_not_rewritten() -> None:
    """A test file that calls ``TestTubeLogger(...)`` with no import of it (a held-out real file's shape): which class
    the name is cannot be told, so its arguments stay as written and a TODO asks for TensorBoardLogger."""
    source = "import pytorch_lightning as pl\nlogger = TestTubeLogger(root, name='vit', create_git_tag=True)\n"
    out = upgraded(source)
    assert "# TODO(lightning-mgpu:test-tube-logger): TestTubeLogger was removed" in out
    assert "logger = TestTubeLogger(root, name='vit', create_git_tag=True)" in out
    assert unmarked(out) == [] and upgraded(out) == out
