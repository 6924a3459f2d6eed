"""Removed names reached through a local name: a namespace subpackage imported by name (``from pytorch_lightning
import loggers``, then ``loggers.TestTubeLogger``: rules ``renamed-name``, ``plugin-class``, ``bundle-name``,
``bundle-class``) and a DataModule class held in a variable (``dm_cls = MNISTDataModule``, then
``dm_cls.from_argparse_args(args)``: rule ``trainer-argparse``)."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.upgrade_check import upgraded_result

SUBPACKAGES = """from pytorch_lightning import LightningModule, Trainer, loggers
from pytorch_lightning import plugins as pl_plugins
import pytorch_lightning.callbacks as plc


def main(hparams):
    logger = loggers.TestTubeLogger(save_dir="logs", name=hparams.exp_name, debug=False)
    base = loggers.LightningLoggerBase
    stats = plc.GPUStatsMonitor()
    trainer = Trainer(logger=logger, plugins=[pl_plugins.DDPPlugin(find_unused_parameters=False)], gpus=2)
    spawn = pl_plugins.DDPSpawnPlugin()
    sharded = pl_plugins.DDPShardedPlugin()
    kept = loggers.TensorBoardLogger("logs")
"""

DATAMODULE_VARIABLE = """from argparse import ArgumentParser
from pytorch_lightning import LightningDataModule, Trainer
from my_datamodules import CIFAR10DataModule, MNISTDataModule


class HumanData(LightningDataModule):
    pass


def cli_main(args=None):
    parser = ArgumentParser()
    script_args, _ = parser.parse_known_args(args)
    if script_args.dataset == "mnist":
        dm_cls = MNISTDataModule
    elif script_args.dataset == "cifar10":
        dm_cls = CIFAR10DataModule
    else:
        dm_cls = HumanData
    parser = dm_cls.add_argparse_args(parser)
    args = parser.parse_args(args)
    dm = dm_cls.from_argparse_args(args)
    builder = make_builder()
    thing = builder.from_argparse_args(args)
    return dm, thing
"""


def upgraded(source: str) -> tuple[str, set[str]]:
    result = upgraded_result(source)
    return result.source, {f.rule for f in result.changes}


def test_removed_names_through_a_subpackage_alias() -> None:
    out, rules = upgraded(SUBPACKAGES)
    lines = [line.strip() for line in out.splitlines()]
    for expected in (
        'logger = loggers.TensorBoardLogger(save_dir="logs", name=hparams.exp_name)',
        "base = loggers.Logger",
        "stats = GPUUtilizationMonitor()",
        "from lightning_mgpu.pl.callbacks import GPUUtilizationMonitor",
        "from pytorch_lightning.strategies import DDPStrategy",
        'spawn = DDPStrategy(start_method="spawn")',
        "sharded = ShardedStrategy()",
        'kept = loggers.TensorBoardLogger("logs")',
    ):
        assert expected in lines, (expected, out)
    assert "strategy=DDPStrategy(find_unused_parameters=False)" in out
    assert {"renamed-name", "test-tube-logger-args", "bundle-name", "plugin-class", "bundle-class"} <= rules
    assert unmarked(out) == []


def test_a_datamodule_class_in_a_variable() -> None:
    out, rules = upgraded(DATAMODULE_VARIABLE)
    lines = [line.strip() for line in out.splitlines()]
    assert "parser = add_argparse_args(dm_cls, parser)" in lines, out
    assert "dm = from_argparse_args(dm_cls, args)" in lines, out
    # Something the file does not show to be a DataModule is left: most likely a class's own classmethod (a
    # LightningModule had none in 1.x), which the scan does not count as a 1.x spelling either.
    assert "thing = builder.from_argparse_args(args)" in lines, out
    assert "trainer-argparse" in rules
    assert unmarked(out) == []


def test_a_variable_that_may_hold_something_else_is_left() -> None:
    source = (
        "from pytorch_lightning import Trainer\n"
        "def f(flag, args):\n"
        "    cls = MNISTDataModule if flag else load_class()\n"
        "    return cls.from_argparse_args(args)\n"
    )
    out, _ = upgraded(source)
    assert "cls.from_argparse_args(args)" in out
