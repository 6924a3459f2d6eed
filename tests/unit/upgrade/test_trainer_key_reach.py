"""``trainer-key-unfollowed`` fires only where the settings holding a 1.x Trainer key may reach a Trainer whole
(scopes.py's ``FileFacts.may_reach_trainer``): a config whose fields the script reads into a Trainer call itself, a
hyperparameter dict handed to a model, or a caller's dict whose key is reset, get no TODO."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.transform import upgrade_source

ATTRIBUTE_CONFIG = """import pytorch_lightning as pl
from munch import Munch


def fit_stage(setup, net, data):
    trainer = pl.Trainer(
        max_epochs=setup.runner.epochs,
        gpus=setup.runner.gpus,
        resume_from_checkpoint=setup.runner.resume_from_checkpoint,
    )
    trainer.fit(net, data)
    return trainer.callback_metrics


def read_options(flags):
    setup = Munch({"seed": 1, "out": flags.out})
    setup.runner = Munch({"epochs": flags.epochs, "gpus": flags.gpus, "resume_from_checkpoint": flags.resume})
    return flags, setup


if __name__ == "__main__":
    flags, setup = read_options(parse())
    fit_stage(setup, build_net(setup), build_data(setup))
"""

HPARAMS_TO_MODEL = """import pytorch_lightning as pl


def main(knobs):
    net = Net(knobs)
    trainer = pl.Trainer(gpus=knobs["gpus"], max_epochs=knobs["epochs"])
    trainer.fit(net)


if __name__ == "__main__":
    knobs = {"lr": 0.01, "gpus": [0], "epochs": 3}
    main(knobs)
"""

CALLERS_DICT = """from pytorch_lightning import Trainer


class Pipeline:
    def train(self, run_args):
        if run_args["resume_from_checkpoint"] and not run_args["resume_from_checkpoint"].endswith(".ckpt"):
            run_args["resume_from_checkpoint"] = None
        trainer = Trainer(max_epochs=run_args["epochs"], logger=False)
        trainer.fit(self.model(run_args))
"""


@pytest.mark.parametrize("source", [ATTRIBUTE_CONFIG, HPARAMS_TO_MODEL, CALLERS_DICT])
def test_settings_that_never_reach_a_trainer_whole_get_no_todo(source: str) -> None:
    result = upgrade_source(source)
    assert "trainer-key-unfollowed" not in result.source, result.source
    assert upgrade_source(result.source).source == result.source
    # leftovers.py's dict-key check still names these keys: it needs the same exemption before the scan agrees.
    assert {kind for _, kind in unmarked(result.source)} <= {
        "{'gpus': ...}",
        "{'resume_from_checkpoint': ...}",
        "['resume_from_checkpoint'] = ...",
    }


def test_the_trainer_call_that_reads_the_fields_is_still_converted() -> None:
    out = upgrade_source(ATTRIBUTE_CONFIG).source
    assert 'accelerator="gpu" if setup.runner.gpus else "cpu"' in out and "devices=setup.runner.gpus or 1" in out
    assert "trainer.fit(net, data, ckpt_path=setup.runner.resume_from_checkpoint)" in out, out


@pytest.mark.parametrize(
    ("source", "handoff"),
    [
        # hydra's instantiate builds a Trainer from the config, untranslated.
        (ATTRIBUTE_CONFIG, "    runner = instantiate(setup.runner)\n"),
        # The whole config is splatted into a call the tool does not translate.
        (HPARAMS_TO_MODEL, "    launch(**knobs)\n"),
        # The dict goes to a function whose result is a trainer.
        (HPARAMS_TO_MODEL, "    other_trainer = make_trainer(knobs)\n"),
    ],
)
def test_settings_that_may_reach_a_trainer_whole_keep_the_todo(source: str, handoff: str) -> None:
    out = upgrade_source(source + handoff).source
    assert "TODO(lightning-mgpu:trainer-key-unfollowed): 1.x Trainer key 'gpus'" in out, out
