"""``lightning_mgpu.upgrade.leftover_spellings``: the 1.x spellings real code had that no other rewrite reached (issue
53). Each is rewritten where its meaning is certain or gets a TODO at the spot; none is left silent
(``leftovers.unmarked`` finds nothing), and a second run changes nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded


def todo_above(out: str, statement: str, rule: str) -> bool:
    """Whether the line holding ``statement`` has a ``rule`` TODO right above it."""
    lines = [line.strip() for line in out.splitlines()]
    index = lines.index(statement)
    return lines[index - 1].startswith(f"# TODO(lightning-mgpu:{rule})")


# -- trainer-key-unfollowed -------------------------------------------------------------------------------------------

YAML_CONFIG = """import torch
import yaml
from pytorch_lightning import Trainer


def train(path, model_cls):
    with open(path) as handle:
        settings = yaml.safe_load(handle)
    settings["gpus"] = torch.cuda.device_count()
    network = model_cls(settings)
    trainer = Trainer(max_epochs=settings["epochs"], gpus=settings["gpus"])
    trainer.fit(network)
"""


def test_a_key_the_script_reads_itself_into_a_trainer_call_gets_no_todo() -> None:
    # The config comes from a YAML file and is handed to the model whole; the Trainer call reads its "gpus" (and that
    # call's rewrite converts it). Nothing hands the config to a Trainer whole: the key is the script's own.
    out = upgraded(YAML_CONFIG, no_unmarked=True)  # the scan (leftover_reach) agrees: nothing unmarked
    assert "trainer-key-unfollowed" not in out, out
    assert 'accelerator="gpu" if settings["gpus"] else "cpu", devices=settings["gpus"] or 1' in out  # the call's own


@pytest.mark.parametrize(
    "handoff",
    [
        "    trainer_two = build_trainer(settings)\n",  # an unknown function whose result is a trainer
        "    return settings\n",  # returned by a function no code of this file calls: its caller is elsewhere
        "    instantiate(settings)\n",  # hydra builds what it is handed, untranslated
        "    run(**settings)\n",  # splatted into something the tool does not translate
        "    alias = settings\n    second_trainer = make_trainer(config=alias)\n",  # through an alias
    ],
)
def test_a_key_written_into_a_config_that_may_reach_a_trainer_whole_gets_a_todo(handoff: str) -> None:
    out = upgraded(YAML_CONFIG + handoff)
    assert todo_above(out, 'settings["gpus"] = torch.cuda.device_count()', "trainer-key-unfollowed"), out
    assert "1.x Trainer key 'gpus'" in out


NAMESPACE_HANDOFF = """import argparse
from omegaconf import OmegaConf
from pytorch_lightning import Trainer


def build(project, overrides):
    trainer_cfg = OmegaConf.merge(project.get("trainer", {}), overrides)
    trainer_cfg["distributed_backend"] = "ddp"
    if "gpus" not in trainer_cfg:
        del trainer_cfg["distributed_backend"]
    flags = argparse.Namespace(**trainer_cfg)
    return Trainer.from_argparse_args(flags)
"""


def test_a_key_written_into_settings_that_reach_a_namespace_gets_a_todo_not_the_del() -> None:
    out = upgraded(NAMESPACE_HANDOFF, no_unmarked=True)
    assert todo_above(out, 'trainer_cfg["distributed_backend"] = "ddp"', "trainer-key-unfollowed")
    assert out.count("trainer-key-unfollowed") == 1  # the del and the membership test write nothing
    assert "from_argparse_args(Trainer, flags)" in out  # translates the keys at run time


CALLBACK_LABELS = """from omegaconf import OmegaConf


def callbacks(checkpoint_cfg, extra):
    named = {"lr_monitor": {"target": "pytorch_lightning.callbacks.LearningRateMonitor"}}
    named.update({"checkpoint_callback": checkpoint_cfg})
    plain = dict(progress_bar_refresh_rate=extra)
    return OmegaConf.merge(named, plain)
"""


def test_a_dict_literal_or_dict_call_with_a_1x_key_gets_a_todo() -> None:
    out = upgraded(CALLBACK_LABELS, no_unmarked=True)
    assert todo_above(out, 'named.update({"checkpoint_callback": checkpoint_cfg})', "trainer-key-unfollowed")
    assert todo_above(out, "plain = dict(progress_bar_refresh_rate=extra)", "trainer-key-unfollowed")


FOLLOWED = """from pytorch_lightning import Trainer

settings = {"max_epochs": 3}
settings["gpus"] = 2
trainer = Trainer(**settings)
"""


def test_a_dict_the_tool_follows_into_a_trainer_is_rewritten_without_a_todo() -> None:
    out = upgraded(FOLLOWED, no_unmarked=True)
    assert "TODO" not in out
    assert 'settings["accelerator"] = "gpu"' in out and 'settings["devices"] = 2' in out


# -- trainer-accelerator-connector ------------------------------------------------------------------------------------

CONNECTOR = """import pytorch_lightning as pl


class Module(pl.LightningModule):
    @property
    def sync_dist(self) -> bool:
        return self.trainer.accelerator_connector.use_ddp or self.trainer.accelerator_connector.use_ddp2

    def connector_of(self, other):
        return other.accelerator_connector  # not a trainer's: kept
"""


def test_accelerator_connector_gets_one_todo_per_statement() -> None:
    out = upgrade_source(CONNECTOR).source
    assert upgrade_source(out).source == out and unmarked(out) == []
    statement = "return self.trainer.accelerator_connector.use_ddp or self.trainer.accelerator_connector.use_ddp2"
    assert todo_above(out, statement, "trainer-accelerator-connector")
    assert out.count("TODO(lightning-mgpu:trainer-accelerator-connector)") == 1
    assert not todo_above(
        out, "return other.accelerator_connector  # not a trainer's: kept", "trainer-accelerator-connector"
    )


# -- result-object ----------------------------------------------------------------------------------------------------

RESULTS = """import pytorch_lightning as pl
from pytorch_lightning import EvalResult


class AutoEncoder(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self(batch).mean()
        result = pl.TrainResult(minimize=loss)
        result.log("train_loss", loss, prog_bar=True)
        # the object handed on: result-object-log does not follow it
        self.keep(result)
        return result

    def validation_step(self, batch, batch_idx):
        loss = self(batch).mean()
        # hiddens: no self.log counterpart
        return EvalResult(checkpoint_on=loss, hiddens=loss)
"""


def test_train_and_eval_results_get_a_todo_each() -> None:
    out = upgrade_source(RESULTS).source
    assert upgrade_source(out).source == out
    assert todo_above(out, "result = pl.TrainResult(minimize=loss)", "result-object")
    assert todo_above(out, "return EvalResult(checkpoint_on=loss, hiddens=loss)", "result-object")
    assert "TrainResult is gone" in out and "EvalResult is gone" in out
    assert todo_above(out, "from pytorch_lightning import EvalResult", "result-object")
    assert unmarked(out) == []


# -- eval-step-optimizer-idx ------------------------------------------------------------------------------------------

EVAL_STEPS = """import pytorch_lightning as pl


class VAE(pl.LightningModule):
    def validation_step(self, batch, batch_idx, optimizer_idx=0):
        recon = self(batch)
        loss = self.loss(recon, batch, optimizer_idx=optimizer_idx, scale=self.optimizer_idx)
        self.log("val_loss", loss[optimizer_idx])

    def test_step(self, batch, batch_idx, optimizer_idx=0):
        return self(batch)

    def predict_step(self, batch, batch_idx, optimizer_idx):
        return self(batch)[optimizer_idx]


class Helper:
    def validation_step(self, batch, batch_idx, optimizer_idx=0):  # not Lightning's: kept
        return optimizer_idx
"""


def test_an_eval_step_loses_optimizer_idx_and_reads_its_default() -> None:
    result = upgrade_source(EVAL_STEPS)
    out = result.source
    assert upgrade_source(out).source == out
    lines = [line.strip() for line in out.splitlines()]
    assert "def validation_step(self, batch, batch_idx):" in lines
    assert "loss = self.loss(recon, batch, optimizer_idx=0, scale=self.optimizer_idx)" in lines  # keyword kept
    assert 'self.log("val_loss", loss[0])' in lines
    assert "def test_step(self, batch, batch_idx):" in lines  # unused: only dropped
    # No default: 1.x could only have passed a dataloader_idx there; a person decides.
    assert todo_above(out, "def predict_step(self, batch, batch_idx, optimizer_idx):", "eval-step-optimizer-idx")
    assert "def validation_step(self, batch, batch_idx, optimizer_idx=0):  # not Lightning's: kept" in lines
    rewrites = [f for f in result.findings if f.rule == "eval-step-optimizer-idx" and not f.todo]
    assert len(rewrites) == 2


SUPER_AND_ASSIGN = """import pytorch_lightning as pl


class Child(pl.LightningModule):
    def validation_step(self, batch, batch_idx, optimizer_idx=0):
        return super().validation_step(batch, batch_idx, optimizer_idx)

    def test_step(self, batch, batch_idx, optimizer_idx=0):
        optimizer_idx += 1
        return optimizer_idx
"""


def test_an_eval_step_that_hands_on_or_rebinds_the_index_keeps_a_todo() -> None:
    out = upgraded(SUPER_AND_ASSIGN, no_unmarked=True)
    assert todo_above(out, "def validation_step(self, batch, batch_idx, optimizer_idx=0):", "eval-step-optimizer-idx")
    assert todo_above(out, "def test_step(self, batch, batch_idx, optimizer_idx=0):", "eval-step-optimizer-idx")


def test_the_new_rules_are_explained() -> None:
    for rule in ("trainer-key-unfollowed", "trainer-accelerator-connector", "result-object", "eval-step-optimizer-idx"):
        assert rules.explain(rule), rule
