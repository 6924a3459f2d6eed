"""1.x's command-line helpers beyond add/from_argparse_args (rule ``trainer-argparse``): ``Trainer.parse_argparser``
and the functions of ``pytorch_lightning.utilities.argparse`` (``parse_argparser``, ``parse_env_variables``,
``get_init_arguments_and_types``), rewritten to ``lightning_mgpu.upgrade.trainer_args``, which has them with 1.x's
signatures and semantics; the module's other names keep their import with an ``argparse-utility`` TODO."""

from __future__ import annotations

import argparse
import inspect

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.trainer_args import (
    from_argparse_args,
    get_init_arguments_and_types,
    parse_argparser,
    parse_env_variables,
)
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded

IMPORT = "from lightning_mgpu.upgrade.trainer_args import"


@pytest.fixture
def pl():  # noqa: ANN201
    return pytest.importorskip("pytorch_lightning")


def test_trainer_parse_argparser_becomes_the_function() -> None:
    source = (
        "from pytorch_lightning import Trainer\n\n\ndef cli(options):\n"
        "    flags = Trainer.parse_argparser(options)\n    return Trainer.from_argparse_args(flags)\n"
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert "    flags = parse_argparser(Trainer, options)\n    return from_argparse_args(Trainer, flags)\n" in out
    assert f"{IMPORT} from_argparse_args, parse_argparser\n" in out, out


SUBCLASS = """from argparse import ArgumentParser, Namespace
from typing import Union

import pytorch_lightning as pl
from pytorch_lightning.utilities.argparse import (
    add_argparse_args,
    from_argparse_args,
    parse_argparser,
    parse_env_variables,
)


class LabTrainer(pl.Trainer):
    @classmethod
    def from_argparse_args(cls, args: Union[Namespace, ArgumentParser], **kwargs):
        return from_argparse_args(cls, args, **kwargs)

    @classmethod
    def parse_argparser(cls, arg_parser: Union[ArgumentParser, Namespace]) -> Namespace:
        return parse_argparser(cls, arg_parser)

    @classmethod
    def match_env_arguments(cls) -> Namespace:
        return parse_env_variables(cls)

    @classmethod
    def add_argparse_args(cls, parent_parser: ArgumentParser, **kwargs) -> ArgumentParser:
        return add_argparse_args(cls, parent_parser, **kwargs)
"""


def test_the_module_functions_come_from_the_bundle_in_a_trainer_subclass(pl, monkeypatch) -> None:
    out = upgraded(SUBCLASS, no_todo=True, no_unmarked=True)
    assert "utilities.argparse" not in out
    assert f"{IMPORT} add_argparse_args, from_argparse_args, parse_argparser, parse_env_variables\n" in out, out
    namespace: dict[str, object] = {}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102
    lab = namespace["LabTrainer"]
    parser = lab.add_argparse_args(argparse.ArgumentParser(add_help=False))  # type: ignore[attr-defined]
    args = lab.parse_argparser(parser.parse_args(["--max_epochs", "4", "--gpus", "0"]))  # type: ignore[attr-defined]
    trainer = lab.from_argparse_args(args, logger=False, enable_checkpointing=False)  # type: ignore[attr-defined]
    assert isinstance(trainer, lab) and trainer.max_epochs == 4  # type: ignore[arg-type]
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"
    monkeypatch.setenv("LABTRAINER_GPUS", "0")  # another template's variable: not read
    monkeypatch.setenv("PL_LABTRAINER_MAX_EPOCHS", "7")
    monkeypatch.setenv("PL_LABTRAINER_GPUS", "0")
    assert vars(lab.match_env_arguments()) == {"max_epochs": 7, "gpus": 0}  # type: ignore[attr-defined]


def test_a_name_the_bundle_lacks_keeps_its_import_with_a_todo() -> None:
    source = "from pytorch_lightning.utilities.argparse import _gpus_allowed_type, parse_env_variables\n"
    out = upgrade_source(source).source
    assert "TODO(lightning-mgpu:argparse-utility): _gpus_allowed_type is gone" in out, out
    assert "from pytorch_lightning.utilities.argparse import _gpus_allowed_type\n" in out
    assert f"{IMPORT} parse_env_variables\n" in out
    assert upgrade_source(out).source == out


def test_parse_argparser_reads_a_bare_bool_flag_as_true(pl) -> None:
    parsed = argparse.Namespace(fast_dev_run=None, barebones=None, enable_checkpointing=None, my_flag=None, lr=0.1)
    out = parse_argparser(pl.Trainer, parsed)
    # fast_dev_run and barebones take a bool and default to False: a flag given alone is on (1.x's nargs="?").
    assert out.fast_dev_run is True and out.barebones is True
    # enable_checkpointing defaults to None, my_flag is the script's own: None stays None.
    assert out.enable_checkpointing is None and out.my_flag is None and out.lr == 0.1
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_epochs", type=int, default=None)
    parser.parse_args = lambda: parser.parse_known_args(["--max_epochs", "2"])[0]  # type: ignore[method-assign]
    assert parse_argparser(pl.Trainer, parser).max_epochs == 2  # a parser: parsed first


def test_parse_env_variables_reads_the_1x_arguments_too(pl, monkeypatch) -> None:
    assert vars(parse_env_variables(pl.Trainer)) == {}
    monkeypatch.setenv("PL_TRAINER_GPUS", "2")
    monkeypatch.setenv("PL_TRAINER_DEFAULT_ROOT_DIR", "/runs/a")  # not a literal: the string
    monkeypatch.setenv("PL_TRAINER_ACCELERATOR", "")  # empty: not set
    monkeypatch.setenv("PL_TRAINER_NOT_AN_ARGUMENT", "1")
    assert vars(parse_env_variables(pl.Trainer)) == {"default_root_dir": "/runs/a", "gpus": 2}
    monkeypatch.setenv("CFG_TRAINER_MAX_STEPS", "10")
    assert vars(parse_env_variables(pl.Trainer, template="CFG_%(cls_name)s_%(cls_argument)s")) == {"max_steps": 10}


def test_get_init_arguments_and_types_as_1x_gave_them(pl) -> None:
    found = {name: (types, default) for name, types, default in get_init_arguments_and_types(pl.Trainer)}
    assert found["max_epochs"] == ((int, type(None)), None)
    assert bool in found["fast_dev_run"][0] and int in found["fast_dev_run"][0]

    def plain(a, b: int = 3, *, c: str | None = None):  # noqa: ANN001, ANN202
        return a, b, c

    assert get_init_arguments_and_types(plain) == [
        ("a", (inspect.Parameter.empty,), inspect.Parameter.empty),
        ("b", (int,), 3),
        ("c", (str, type(None)), None),
    ]


def test_from_argparse_args_parses_a_parser_as_1x_did(pl) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_epochs", type=int, default=5)
    parser.parse_args = lambda: parser.parse_known_args([])[0]  # type: ignore[method-assign]
    trainer = from_argparse_args(pl.Trainer, parser, logger=False, enable_checkpointing=False)
    assert trainer.max_epochs == 5


# -- the leftover scan agrees with the tool on which receivers had these classmethods ----------------------------------

UNRESOLVED = """import pytorch_lightning as pl
from helpers import class_named


def build(args):
    net_cls = class_named(args.arch)
    return net_cls.from_argparse_args(args)
"""


def test_an_unresolved_receivers_own_classmethod_is_left_and_not_flagged() -> None:
    # A class the file cannot resolve is most likely a LightningModule, whose from_argparse_args (1.x had none) is
    # the user's own: the tool leaves it, and the scan does not count it as a 1.x spelling.
    assert upgrade_source(UNRESOLVED).source == UNRESOLVED
    assert unmarked(UNRESOLVED) == []


@pytest.mark.parametrize(
    "source",
    [
        "import pytorch_lightning as pl\nt = pl.Trainer.from_argparse_args(args)\n",
        "from pytorch_lightning import Trainer\nflags = Trainer.parse_argparser(opts)\n",
        "from pytorch_lightning import LightningDataModule\nclass Frames(LightningDataModule):\n    pass\n"
        "parser = Frames.add_argparse_args(parser)\n",
        "from x import VideoDataModule\nkinds = VideoDataModule.get_init_arguments_and_types()\n",
    ],
)
def test_the_scan_flags_the_classmethods_on_a_trainer_or_a_datamodule(source: str) -> None:
    assert len(unmarked(source)) == 1, unmarked(source)
    assert unmarked(upgraded(source, no_todo=True, no_unmarked=True)) == []  # and the tool converts each
