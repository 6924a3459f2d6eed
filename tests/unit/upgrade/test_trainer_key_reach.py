"""``trainer-key-unfollowed`` fires only where the settings holding a 1.x Trainer key may reach a Trainer whole
(scopes.py's ``FileFacts.may_reach_trainer``): a config whose fields the script reads into a Trainer call itself, a
hyperparameter dict handed to a model, or a caller's dict whose key is reset, get no TODO. The leftover scan decides
the same by itself (leftover_reach.py, with ``ast``): where the settings never reach a Trainer it names no key, and
where they may, it names the key, which the tool's TODO then marks."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import leftovers, unmarked
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.tiny import tiny_module

TODO = "TODO(lightning-mgpu:trainer-key-unfollowed)"


def scan_keys(source: str) -> set[str]:
    """The 1.x settings keys the scan names in ``source``, with the tool's key TODOs taken out (the scan's own
    decision, whatever the tool wrote)."""
    bare = "\n".join(line for line in source.splitlines() if TODO not in line)
    return {what for _, what in leftovers(bare) if what.startswith(("{'", "['", "dict("))}


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


#: held-out 654's shape: a hyperparameter dict written in the main block and never used.
UNUSED_KNOBS = """import pytorch_lightning as pl


def main(knobs, data):
    trainer = pl.Trainer(weights_summary=None, gpus=knobs.gpus, max_epochs=knobs.epochs)
    trainer.fit(Net(knobs), data)


if __name__ == "__main__":
    _knobs = {"lr": 0.01,
              "gpus": [0],
              "epochs": 15,}
"""

#: held-out 542's shape: the caller's settings dict, a key reset in it, its fields read into the Trainer call, the
#: dict merged into another handed to the model and given to a method of the class that builds the modules.
MERGED_CALLERS_DICT = """from pytorch_lightning import Trainer


class Runner:
    def run(self, run_args, net_args):
        if run_args["resume_from_checkpoint"] is not None and not run_args["resume_from_checkpoint"].endswith(".ckpt"):
            run_args["resume_from_checkpoint"] = None
        run_args["callbacks"] = self.callbacks(run_args["callbacks"])
        trainer = Trainer(max_epochs=run_args["epochs"], callbacks=run_args["callbacks"])
        data, net = self.modules(net_args, run_args)
        trainer.fit(net, data)

    def modules(self, net_args, run_args):
        merged = {**net_args, **run_args}
        head = HEADS[merged["head"]](merged)
        return Data(merged), Net(settings=merged, head=head)
"""

#: held-out 777's shape (a notebook's cells): a module-level dict whose fields two Trainer calls read.
NOTEBOOK_KNOBS = """from pytorch_lightning import Trainer

knobs = {
    "batch_size": 64,
    "max_epochs": 3,
    "gpus": [0],
}
first = Trainer(gpus=knobs["gpus"], max_epochs=knobs["max_epochs"])
first.fit(net_a, loader)
second = Trainer(gpus=knobs["gpus"], max_epochs=knobs["max_epochs"])
second.fit(net_b, loader)
"""

NEVER_REACHING = [ATTRIBUTE_CONFIG, HPARAMS_TO_MODEL, CALLERS_DICT, UNUSED_KNOBS, MERGED_CALLERS_DICT, NOTEBOOK_KNOBS]


@pytest.mark.parametrize("source", NEVER_REACHING)
def test_settings_that_never_reach_a_trainer_whole_get_no_todo(source: str) -> None:
    result = upgrade_source(source)
    assert "trainer-key-unfollowed" not in result.source, result.source
    assert upgrade_source(result.source).source == result.source
    compile(result.source, "<upgraded>", "exec")
    # The scan reads the same: the keys are the script's own, no leftover.
    assert unmarked(result.source) == [], result.source


def test_a_notebook_whose_dict_never_reaches_a_trainer_converts_fully() -> None:
    nbformat = pytest.importorskip("nbformat")
    from lightning_mgpu.upgrade.notebook import upgrade_notebook

    cells = NOTEBOOK_KNOBS.split("\nfirst = ")
    book = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(cells[0]), nbformat.v4.new_code_cell("first = " + cells[1])]
    )
    out = upgrade_notebook(nbformat.writes(book)).text
    code = "\n".join(cell.source for cell in nbformat.reads(out, as_version=4).cells)
    assert TODO not in code and 'devices=knobs["gpus"]' in code, code
    assert unmarked(code) == [], code


def test_the_trainer_call_that_reads_the_fields_is_still_converted() -> None:
    out = upgrade_source(ATTRIBUTE_CONFIG).source
    assert 'accelerator="gpu" if setup.runner.gpus else "cpu"' in out and "devices=setup.runner.gpus or 1" in out
    assert "trainer.fit(net, data, ckpt_path=setup.runner.resume_from_checkpoint)" in out, out


RUNNABLE_CONFIG = """import pytorch_lightning as pl


class Munch(dict):
    __getattr__ = dict.__getitem__
    __setattr__ = dict.__setitem__


def fit_stage(setup, net, loader):
    trainer = pl.Trainer(
        max_epochs=setup.runner.epochs,
        gpus=setup.runner.gpus,
        resume_from_checkpoint=setup.runner.resume_from_checkpoint,
        default_root_dir=setup.root,
        logger=False,
        enable_progress_bar=False,
    )
    trainer.fit(net, loader)
    return trainer


def read_options(epochs, resume, root):
    setup = Munch({"seed": 1, "root": root})
    setup.runner = Munch({"epochs": epochs, "gpus": 0, "resume_from_checkpoint": resume})
    return setup


def main(epochs, resume, root, net, loader, done):
    done.append(fit_stage(read_options(epochs, resume, root), net, loader))
"""


def test_the_converted_config_trains_and_resumes_as_1x_did(tmp_path) -> None:
    """Run on Lightning 2.x: the config's gpus=0 is the CPU, as in 1.x, and its resume_from_checkpoint, read by the
    converted call, resumes the fit: the keys left in the config need no edit."""
    pytest.importorskip("pytorch_lightning")
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    result = upgrade_source(RUNNABLE_CONFIG)
    assert TODO not in result.source and unmarked(result.source) == [], result.source
    namespace: dict[str, object] = {}
    exec(compile(result.source, "<converted>", "exec"), namespace)  # noqa: S102
    main = namespace["main"]
    loader = DataLoader(TensorDataset(torch.randn(12, 3)), batch_size=4)
    done: list = []
    main(1, None, tmp_path / "a", tiny_module("pytorch_lightning"), loader, done)  # type: ignore[operator]
    first = done[-1]
    assert first.global_step == 3 and type(first.accelerator).__name__ == "CPUAccelerator"  # gpus=0: the CPU
    first.save_checkpoint(tmp_path / "last.ckpt")
    main(2, str(tmp_path / "last.ckpt"), tmp_path / "b", tiny_module("pytorch_lightning"), loader, done)  # type: ignore[operator]
    assert done[-1].global_step == 6 and done[-1].current_epoch == 2  # one more epoch on top of the first


#: held-out 512's shape: a function builds the settings, keys and all, and its result is splatted into a Trainer.
BUILT_AND_SPLATTED = """import pytorch_lightning as pl


class Runner:
    def __init__(self, cfg):
        self.engine = pl.Trainer(**engine_settings(cfg))


def engine_settings(cfg):
    settings = {"gpus": cfg["gpus"], "weights_summary": "top", "max_epochs": 3}
    if cfg["resume"]:
        settings["resume_from_checkpoint"] = cfg["resume"]
    return settings
"""


@pytest.mark.parametrize(
    ("source", "handoff"),
    [
        # hydra's instantiate builds a Trainer from the config, untranslated.
        (ATTRIBUTE_CONFIG, "    runner = instantiate(setup.runner)\n"),
        # The whole config is splatted into a call the tool does not translate.
        (HPARAMS_TO_MODEL, "    launch(**knobs)\n"),
        # The dict goes to a function whose result is a trainer.
        (HPARAMS_TO_MODEL, "    other_trainer = make_trainer(knobs)\n"),
        # ... or whose result's fit is called at once.
        (HPARAMS_TO_MODEL, "    make_engine(knobs).fit(net)\n"),
        # Given by keyword to a from_argparse_args that is no Trainer's (which translates nothing).
        (HPARAMS_TO_MODEL, "    Frames.from_argparse_args(args=knobs)\n"),
        # A Trainer's settings by keyword (LightningCLI's trainer_defaults, a library's trainer_kwargs).
        (HPARAMS_TO_MODEL, "    LightningCLI(Net, trainer_defaults=knobs)\n"),
        # Positionally to a class named ...Trainer.
        (HPARAMS_TO_MODEL, "    engine = HydraTrainer(knobs)\n"),
        # Merged into a dict that is splatted.
        (HPARAMS_TO_MODEL, "    merged = {**defaults, **knobs}\n    launch(**merged)\n"),
        # Copied key by key into a dict that is splatted.
        (
            HPARAMS_TO_MODEL,
            "    kept = {}\n    for key, value in knobs.items():\n        kept[key] = value\n    launch(**kept)\n",
        ),
        # Handed to a function of the file whose parameter is splatted into a call of elsewhere.
        (HPARAMS_TO_MODEL, "    start(knobs)\n\n\ndef start(options):\n    launch(**options).fit(None)\n"),
        # One of the values a call hands back, splatted.
        (HPARAMS_TO_MODEL, "    head, tail = split(knobs)\n    launch(**tail)\n"),
        # Returned by a function of the file whose result is splatted into a call of elsewhere.
        (BUILT_AND_SPLATTED.replace("pl.Trainer(**engine_settings(cfg))", "launch(**engine_settings(cfg))"), ""),
    ],
)
def test_settings_that_may_reach_a_trainer_whole_keep_the_todo(source: str, handoff: str) -> None:
    out = upgrade_source(source + handoff).source
    assert "TODO(lightning-mgpu:trainer-key-unfollowed): 1.x Trainer key 'gpus'" in out, out
    assert upgrade_source(out).source == out
    # The scan names the key by itself (the TODOs taken out), and the TODO marks it.
    assert "{'gpus': ...}" in scan_keys(out), out
    assert unmarked(out) == [], out


@pytest.mark.parametrize(
    "source",
    [
        # A class attribute, read as self.opts: not followed by either.
        "import pytorch_lightning as pl\n\n\nclass Job:\n    opts = {'gpus': 2}\n\n"
        "    def go(self):\n        return pl.Trainer(**self.opts)\n",
        # self.opts splatted through another name of the object into a call of elsewhere.
        "import pytorch_lightning as pl\n\n\nclass Job:\n    def __init__(self):\n        self.opts = {'gpus': 2}\n"
        "\n\ndef go():\n    job = Job()\n    engine = launch(**job.opts)\n    engine.fit(None)\n",
        # A dict handed straight to a call that may build anything from it.
        "import pytorch_lightning as pl\n\n\ndef go(net):\n    engine = build({'gpus': 2})\n    engine.fit(net)\n",
    ],
)
def test_settings_the_reach_does_not_follow_keep_the_todo(source: str) -> None:
    out = upgrade_source(source).source
    assert "TODO(lightning-mgpu:trainer-key-unfollowed): 1.x Trainer key 'gpus'" in out, out
    assert "{'gpus': ...}" in scan_keys(out) and unmarked(out) == [], out


@pytest.mark.parametrize(
    ("source", "handoff"),
    [
        (HPARAMS_TO_MODEL, "    pl.Trainer.from_argparse_args(args=knobs)\n"),
        (HPARAMS_TO_MODEL, "    start(knobs)\n\n\ndef start(options):\n    pl.Trainer(**options).fit(None)\n"),
        (BUILT_AND_SPLATTED, ""),
    ],
)
def test_settings_that_reach_a_trainer_only_translated_need_no_todo_for_gpus(source: str, handoff: str) -> None:
    """Trainer.from_argparse_args and a splat the tool hands to legacy_trainer_kwargs translate gpus as 1.x read it:
    no TODO for it (test_trainer_key_translated.py); resume_from_checkpoint, which the translation refuses, keeps
    one (trainer-key-refused)."""
    out = upgrade_source(source + handoff).source
    assert "trainer-key-unfollowed" not in out and "{'gpus': ...}" not in scan_keys(out), out
    assert ("TODO(lightning-mgpu:trainer-key-refused)" in out) == ("resume_from_checkpoint" in source), out
    assert upgrade_source(out).source == out and unmarked(out) == [], out
