"""A Trainer is known by where it came from, not only by its name (``trainer_names``, ``trainer_owners`` for the tool,
``leftover_trainers`` for the scan): ``t = pl.Trainer(...)``, ``runner = Trainer.from_argparse_args(args)``,
``self.pl_trainer = Trainer(**cfg)``, ``def run(tr: pl.Trainer)``, ``tr = instantiate(cfg.trainer)`` get the rewrites
and TODOs a ``trainer`` gets, and the scan reports what is left of them; scoped as Python scopes names, and nothing
for an object that is no Trainer (an Optuna or Ray object's ``t.tune(...)``, a config's ``cfg.trainer``)."""

from __future__ import annotations

import ast

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftover_trainers import TrainerOwners
from lightning_mgpu.upgrade.leftovers import leftovers
from lightning_mgpu.upgrade.trainer_names import (
    TrainerScopes,
    annotates_trainer,
    builds_trainer,
    owner_named_like_trainer,
)
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded, upgraded_result

#: Every 1.x Trainer attribute and method the tool and the scan know, on a Trainer named ``t``.
SHORT_NAME = """import pytorch_lightning as pl


def main(model):
    t = pl.Trainer(max_epochs=1)
    t.lr_find(model)
    print(t.root_gpu)
    print(t.progress_bar_dict)
    t.tune(model)
    print(t.training_type_plugin)
    print(t.accelerator_connector)
    print(t.resume_from_checkpoint)
    t.fit(model)
"""


def _trainer_findings(source: str) -> list[tuple[int, str]]:
    return [(line, what) for line, what in leftovers(source) if what.startswith("trainer.")]


def test_a_trainer_under_any_name_gets_the_rewrites_and_todos_a_trainer_name_gets() -> None:
    named = upgraded_result(
        SHORT_NAME.replace("    t.", "    trainer.").replace("(t.", "(trainer.").replace("t = ", "trainer = ")
    )
    result = upgraded_result(SHORT_NAME, no_unmarked=True)
    # The same rewrites and TODOs, line by line, as under the name trainer.
    assert [(f.line, f.rule, f.todo) for f in result.findings] == [(f.line, f.rule, f.todo) for f in named.findings]
    out = result.source
    lines = [line.strip() for line in out.splitlines()]
    assert "Tuner(t).lr_find(model, update_attr=False)" in lines
    assert "print(t.strategy.root_device.index)" in lines
    assert "print({**get_standard_metrics(t), **t.progress_bar_metrics})" in lines
    assert "print(t.strategy)" in lines
    rules_left = {line.split(")")[0] for line in lines if line.startswith("# TODO(lightning-mgpu:")}
    assert rules_left == {
        "# TODO(lightning-mgpu:trainer-tune",
        "# TODO(lightning-mgpu:trainer-accelerator-connector",
        "# TODO(lightning-mgpu:trainer-resume-attribute",
    }
    # The scan sees each spelling in the 1.x source (before this, none was: t is named like nothing).
    assert [what for _, what in _trainer_findings(SHORT_NAME)] == [
        "trainer.lr_find(...)",
        "trainer.root_gpu",
        "trainer.progress_bar_dict",
        "trainer.tune(...)",
        "trainer.training_type_plugin",
        "trainer.accelerator_connector",
        "trainer.resume_from_checkpoint",
    ]


SOURCES = """import hydra
import pytorch_lightning as pl
from pytorch_lightning import Trainer
from typing import Optional


class Experiment:
    def __init__(self, cfg):
        self.pl_trainer = None
        self.pl_trainer = Trainer(**cfg)

    def search(self, model):
        return self.pl_trainer.lr_find(model)


def from_args(args, model):
    runner = Trainer.from_argparse_args(args)
    return runner.root_gpu


def annotated(tr: pl.Trainer, other: Optional["pl.Trainer"] = None):
    return tr.training_type_plugin, other.training_type_plugin


def from_hydra(cfg, model):
    tr = hydra.utils.instantiate(cfg.trainer)
    tr.tune(model)
"""


def test_each_origin_makes_a_trainer() -> None:
    out = upgraded(SOURCES, no_unmarked=True)
    assert "return Tuner(self.pl_trainer).lr_find(model, update_attr=False)" in out  # self.x = Trainer(...), None
    assert "return runner.strategy.root_device.index" in out  # Trainer.from_argparse_args
    assert "return tr.strategy, other.strategy" in out  # a parameter annotated Trainer, Optional["pl.Trainer"]
    assert "# TODO(lightning-mgpu:trainer-tune)" in out  # hydra's instantiate(cfg.trainer)
    assert len(_trainer_findings(SOURCES)) == 4


SCOPED = """import optuna
import pytorch_lightning as pl

t = pl.Trainer()


def uses_the_module_trainer(model):
    return t.root_gpu


def rebinds_it(model):
    t = optuna.create_study()
    t.tune(model)
    return t.root_gpu


def builds_its_own():
    r = pl.Trainer()
    return r


def another_r(r, model):
    r.tune(model)
    return r.root_gpu


class Search:
    t = optuna.create_study()

    def run(self, model):
        return t.root_gpu


def reads_the_global():
    global t
    t = pl.Trainer(max_epochs=2)
    return t.training_type_plugin
"""


def test_a_name_is_a_trainer_where_python_would_read_a_trainer() -> None:
    result = upgraded_result(SCOPED, no_unmarked=True)
    out = result.source.splitlines()
    # Module-level t, read in a function that does not rebind it (and through a class body's own t, which a method
    # does not see), and a global declaration: the Trainer.
    assert out[7] == "    return t.strategy.root_device.index"
    assert "        return t.strategy.root_device.index" in out
    assert "    return t.strategy" in out
    # A function's own t (an Optuna study) and another function's parameter r: not a Trainer, left as they are.
    assert "    t.tune(model)" in out and "    r.tune(model)" in out
    assert "    return r.root_gpu" in out and "    return t.root_gpu" in out
    assert "TODO" not in result.source
    assert [line for line, _ in _trainer_findings(SCOPED)] == [8, 31, 37]


def test_the_scan_does_not_report_an_object_that_is_no_trainer() -> None:
    source = """import optuna
from ray import tune
from transformers import Trainer


def search(space, cfg, model, loaders):
    t = tune.Tuner(space)
    t.tune(model)
    study = optuna.create_study()
    study.tune(model)
    hf = Trainer(model=model)
    hf.lr_find(model)
    if cfg.trainer.resume_from_checkpoint:
        print(cfg.trainer.resume_from_checkpoint, cfg.trainer_opt.progress_bar_dict)
    trainer_opt = cfg.trainer
    return trainer_opt.resume_from_checkpoint
"""
    assert leftovers(source) == []
    assert upgrade_source(source).source == source  # the tool leaves them too


def test_a_config_named_trainer_is_no_trainer_but_the_module_s_trainer_is() -> None:
    source = """import pytorch_lightning as pl


class Model(pl.LightningModule):
    def test_epoch_end(self, outputs):
        self.log_dict({"ckpt": self.trainer.resume_from_checkpoint})

    def configure(self, cfg):
        return cfg.trainer.resume_from_checkpoint
"""
    out = upgraded(source, no_unmarked=True)
    assert out.count("TODO(lightning-mgpu:trainer-resume-attribute)") == 1
    assert [what for _, what in _trainer_findings(source)] == ["trainer.resume_from_checkpoint"]


def test_progress_bar_dict_of_an_owner_read_once_keeps_a_todo() -> None:
    source = """def show(runs):
    return runs[0].trainer.progress_bar_dict
"""
    out = upgraded(source, no_unmarked=True)
    assert "# TODO(lightning-mgpu:trainer-bar-dict-read)" in out
    assert "runs[0].trainer.progress_bar_dict" in out


def test_the_rewritten_attributes_read_what_1x_read_under_2x() -> None:
    """The converted script run under 2.x: t.root_gpu was None off the GPU (1.x), t.training_type_plugin the strategy
    object, t.progress_bar_dict a new dict with the logger's version."""
    source = """import pytorch_lightning as pl


def probe():
    t = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, accelerator="cpu")
    return t, t.root_gpu, t.training_type_plugin, t.progress_bar_dict
"""
    out = upgraded(source, no_todo=True, no_unmarked=True)
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)
    trainer, root_gpu, plugin, bar = namespace["probe"]()  # type: ignore[operator]
    assert root_gpu is None
    assert plugin is trainer.strategy
    assert isinstance(bar, dict) and bar is not trainer.progress_bar_metrics


# -- the shared helper -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("callee", "first", "expected"),
    [
        ("Trainer", None, True),
        ("pl.Trainer", None, True),
        ("lightning.pytorch.Trainer", None, True),
        ("Trainer.from_argparse_args", "args", True),
        ("pl.Trainer.from_argparse_args", "args", True),
        ("from_argparse_args", "Trainer", True),  # the bundle's, what the tool writes
        ("trainer_args.from_argparse_args", "pl.Trainer", True),
        ("MyDataModule.from_argparse_args", "args", False),
        ("hydra.utils.instantiate", "cfg.trainer", True),
        ("instantiate", "cfg.model", False),
        ("optuna.create_study", None, False),
        ("tr.Trainer", None, False),  # import transformers as tr
    ],
)
def test_builds_trainer(callee: str, first: str | None, expected: bool) -> None:
    assert builds_trainer(callee, first, frozenset(), frozenset({"tr"})) is expected


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ("Trainer", True),
        ("pl.Trainer", True),
        ('"pl.Trainer"', True),
        ("Optional[Trainer]", True),
        ("Trainer | None", True),
        ("typing.Union[None, pl.Trainer]", True),
        ("Union[Trainer, int]", False),
        ("list[Trainer]", False),
        ("LightningModule", False),
    ],
)
def test_annotates_trainer(annotation: str, expected: bool) -> None:
    assert annotates_trainer(annotation) is expected


def test_owner_names() -> None:
    assert owner_named_like_trainer("trainer") and owner_named_like_trainer("self.trainer")
    assert owner_named_like_trainer("pl_module.trainer") and owner_named_like_trainer("pl_trainer")
    assert not owner_named_like_trainer("cfg.trainer") and not owner_named_like_trainer("trainer_opt")
    assert not owner_named_like_trainer("self.hparams.trainer") and not owner_named_like_trainer("t")


def test_scopes_resolve_as_python_does() -> None:
    scopes = TrainerScopes()
    scopes.scope("module", None, "module")
    scopes.scope("cls", "module", "class")
    scopes.scope("method", "cls", "function")
    scopes.scope("f", "module", "function")
    scopes.bind("module", "t", "trainer")
    scopes.bind("cls", "t", "other")  # a class attribute: not seen by the class's methods
    scopes.bind("f", "t", "none")
    scopes.bind("f", "t", "trainer")  # t = None, then t = Trainer(...)
    scopes.bind("f", "u", ("f", "t"))  # u = t
    scopes.bind("module", "v", "trainer")
    scopes.bind("module", "v", "other")  # one binding that is not a Trainer: unknown
    assert scopes.holds_trainer("method", "t")
    assert not scopes.holds_trainer("cls", "t")
    assert scopes.holds_trainer("f", "t") and scopes.holds_trainer("f", "u")
    assert not scopes.holds_trainer("f", "v") and not scopes.holds_trainer("f", "w")


def test_the_scan_resolves_the_same_owners_as_the_tool() -> None:
    """The scan's walk (ast) and the tool's (libcst) give the same owners for every fixture above: each spelling the
    scan reports in a 1.x source is one the tool rewrote or marked."""
    for source in (SHORT_NAME, SOURCES, SCOPED):
        tree = ast.parse(source)
        owners = TrainerOwners(tree)
        reported = {line for line, _ in _trainer_findings(source)}
        bound = {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr
            in {"root_gpu", "training_type_plugin", "lr_find", "tune", "progress_bar_dict", "accelerator_connector"}
            | {"resume_from_checkpoint"}
            and owners.is_trainer(node.value)
        }
        touched = {finding.line for finding in upgrade_source(source).findings}
        assert reported == bound and reported <= touched, source


def test_a_trainer_built_in_one_notebook_cell_is_one_in_the_next() -> None:
    nbformat = pytest.importorskip("nbformat", reason="notebooks need the [upgrade] extra")
    from lightning_mgpu.upgrade.notebook import upgrade_notebook

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import pytorch_lightning as pl\nrunner = pl.Trainer(max_epochs=1)"),
        nbformat.v4.new_code_cell("print(runner.root_gpu)\nrunner.tune(model)"),
    ]
    after = upgrade_notebook(nbformat.writes(notebook)).text
    cells = [cell.source for cell in nbformat.reads(after, as_version=4).cells]
    assert cells[1] == (
        "print(runner.strategy.root_device.index)\n"
        "# TODO(lightning-mgpu:trainer-tune): trainer.tune() is gone: run Tuner(trainer) for its auto_* flags that were"
        " on\nrunner.tune(model)"
    )


def test_settings_handed_to_a_call_whose_result_is_annotated_trainer_reach_one() -> None:
    """``runner: pl.Trainer = build(settings)``: the annotation says the call built a Trainer from the settings, for the
    tool (a trainer-key-unfollowed TODO on the 1.x key) and the scan alike."""
    source = """import pytorch_lightning as pl


def make_runner(build):
    settings = {"gpus": 1, "max_epochs": 3}
    runner: pl.Trainer = build(settings)
    return runner
"""
    out = upgraded(source, no_unmarked=True)
    assert "# TODO(lightning-mgpu:trainer-key-unfollowed)" in out


def test_the_scan_walks_a_deep_expression_without_recursion() -> None:
    """A long ``a + b + ...`` is a left-nested tree as deep as it is long: the scan's walk keeps its own stack."""
    chain = " + ".join(f"part{i}" for i in range(1500))
    source = f"import pytorch_lightning as pl\nt = pl.Trainer()\ntotal = {chain}\nprint(t.root_gpu)\n"
    assert leftovers(source) == [(4, "trainer.root_gpu")]


def test_the_scan_shares_only_trainer_names_with_the_tool() -> None:
    """The scan's modules import, of the package, only one another and trainer_names.py, which imports none of it:
    the scan stays independent of the tool's reading, and both ask the one shared question."""
    from pathlib import Path

    import lightning_mgpu.upgrade as package

    folder = Path(package.__file__).parent
    allowed = {
        "leftovers": {"leftover_reach", "leftover_trainers"},
        "leftover_reach": {"trainer_names"},
        "leftover_trainers": {"trainer_names"},
        "trainer_names": set(),
    }
    for module, expected in allowed.items():
        tree = ast.parse((folder / f"{module}.py").read_text())
        imported = {
            node.module.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lightning_mgpu")
        }
        assert imported == expected, module
