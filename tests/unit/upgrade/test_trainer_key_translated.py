"""Settings that reach a Trainer only through the bundle's translation at run time (``Trainer(**settings)`` that the
call's rewrite hands to ``legacy_trainer_kwargs``, ``Trainer.from_argparse_args(Namespace(**settings))``) need no
TODO for a 1.x key that translation takes as 1.x's Trainer read it; a key or value it refuses with a ValueError
(``resume_from_checkpoint=path``) gets ``trainer-key-refused``. The scan decides the same by itself
(leftover_reach.py's own table), and both tables are checked here against ``legacy_trainer_kwargs`` itself."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftover_reach import TRANSLATED
from lightning_mgpu.upgrade.leftovers import leftovers
from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs
from tests.helpers.upgrade_check import upgraded, upgraded_result

REFUSED = "TODO(lightning-mgpu:trainer-key-refused)"
UNFOLLOWED = "TODO(lightning-mgpu:trainer-key-unfollowed)"


def scan_keys(source: str) -> set[str]:
    """The settings keys the scan names in ``source`` with the tool's key TODOs taken out (its own decision)."""
    bare = "\n".join(line for line in source.splitlines() if REFUSED not in line and UNFOLLOWED not in line)
    return {what for _, what in leftovers(bare) if what.startswith(("{'", "['", "dict("))}


# A helper builds the settings; a wrapper class splats its result into the Trainer (one unknown splat: translated).
RETURNED_SETTINGS = """import pytorch_lightning as pl


def runner_options(opts):
    devices = opts["devices"]
    if isinstance(devices, str):
        devices = [int(d) for d in devices.split(",")]
    options = {
        "gpus": devices,
        "max_epochs": opts.get("epochs", 10),
        "weights_summary": "top",
        "replace_sampler_ddp": False,
    }
    if opts.get("backend"):
        options["distributed_backend"] = "ddp"
    if opts.get("restart_from"):
        options["resume_from_checkpoint"] = opts["restart_from"]
    return options


class Runner:
    def __init__(self, opts):
        self.trainer = pl.Trainer(**runner_options(opts))

    def go(self, net):
        self.trainer.fit(net)
"""


def test_returned_settings_need_a_todo_only_for_the_refused_key() -> None:
    out = upgraded(RETURNED_SETTINGS, no_unmarked=True)
    assert 'pl.Trainer(**legacy_trainer_kwargs(runner_options(opts), namespace="pytorch_lightning"))' in out
    assert UNFOLLOWED not in out
    assert out.count(REFUSED) == 1
    refused = out.splitlines().index(next(line for line in out.splitlines() if REFUSED in line))
    assert "resume_from_checkpoint" in out.splitlines()[refused + 1]
    # The scan, by itself, names only the key the translation refuses.
    assert scan_keys(out) == {"['resume_from_checkpoint'] = ..."}


# A config's trainer section, defaulted to a backend, wrapped into a Namespace for from_argparse_args.
NAMESPACE_SETTINGS = """import argparse

import pytorch_lightning as pl


def build(section, cli, callbacks):
    settings = dict(section)
    settings["distributed_backend"] = "ddp"
    for name, value in cli.items():
        settings[name] = value
    if "gpus" not in settings:
        del settings["distributed_backend"]
    trainer_ns = argparse.Namespace(**settings)
    trainer = pl.Trainer.from_argparse_args(trainer_ns, callbacks=callbacks)
    return trainer
"""


def test_namespace_into_from_argparse_args_is_translated() -> None:
    out = upgraded(NAMESPACE_SETTINGS, no_todo=True, no_unmarked=True)
    assert "from_argparse_args(pl.Trainer, trainer_ns, callbacks=callbacks)" in out
    assert scan_keys(out) == set()
    # What the converted call computes: 1.x's Trainer read distributed_backend="ddp" with gpus=2 as two GPUs under
    # DDP (trainer_args.from_argparse_args hands the namespace to legacy_trainer_kwargs).
    assert legacy_trainer_kwargs({"distributed_backend": "ddp", "gpus": 2}) == {
        "strategy": "ddp",
        "accelerator": "gpu",
        "devices": 2,
    }


def test_namespace_also_splatted_raw_keeps_the_unfollowed_todo() -> None:
    # The same settings are also splatted into a function of elsewhere, which may build a Trainer from them
    # untranslated: the key still needs a person.
    source = NAMESPACE_SETTINGS.replace(
        "    return trainer\n", "    launch_sweep(**vars(trainer_ns))\n    return trainer\n"
    )
    out = upgraded(source)
    assert UNFOLLOWED in out
    assert "['distributed_backend'] = ..." in scan_keys(out)


def test_value_the_translation_refuses_or_cannot_be_read() -> None:
    # A backend the tool cannot read, and a ModelCheckpoint in checkpoint_callback: legacy_trainer_kwargs takes only
    # a backend name and True/False, so both keep a TODO (and the scan names both).
    source = NAMESPACE_SETTINGS.replace('"ddp"', "backend_name").replace(
        "def build(section, cli, callbacks):\n    settings = dict(section)\n",
        "def build(section, cli, callbacks, backend_name):\n    settings = dict(section)\n"
        "    settings[\"checkpoint_callback\"] = pl.callbacks.ModelCheckpoint(monitor='val_loss')\n",
    )
    out = upgraded(source, no_unmarked=True)
    assert out.count(REFUSED) == 2
    assert scan_keys(out) == {"['distributed_backend'] = ...", "['checkpoint_callback'] = ..."}


def test_datamodule_from_argparse_args_is_no_translation() -> None:
    # Another class's from_argparse_args translates nothing: the key keeps the unfollowed TODO.
    source = NAMESPACE_SETTINGS.replace(
        "pl.Trainer.from_argparse_args(trainer_ns, ", "Frames.from_argparse_args(trainer_ns, "
    )
    result = upgraded_result(source)
    assert UNFOLLOWED in result.source and REFUSED not in result.source


SAMPLES: dict[str, object] = {
    "gpus": 2,
    "num_processes": 2,
    "replace_sampler_ddp": False,
    "reload_dataloaders_every_epoch": True,
    "progress_bar_refresh_rate": 5,
    "auto_select_gpus": True,
    "amp_level": "O2",
}


@pytest.mark.parametrize("key", sorted(rules.RUN_TIME_KEYS))
def test_the_tables_agree_with_legacy_trainer_kwargs(key: str) -> None:
    taken = rules.RUN_TIME_KEYS[key]
    assert TRANSLATED[key] == taken  # the scan's own copy
    for value in [SAMPLES[key]] if taken is None else taken:
        assert rules.translated_at_run_time(key, value)
        legacy_trainer_kwargs({key: value})  # taken: no ValueError
    assert not rules.translated_at_run_time(key, ...) or taken is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("resume_from_checkpoint", "last.ckpt"),
        ("checkpoint_callback", 1),
        ("distributed_backend", "mpi"),
        ("weights_summary", "deep"),
    ],
)
def test_values_the_tables_refuse_are_refused_at_run_time(key: str, value: object) -> None:
    assert not rules.translated_at_run_time(key, value)
    with pytest.raises(ValueError):
        legacy_trainer_kwargs({key: value})


def test_the_apex_backend_is_refused_beside_16_bit() -> None:
    # amp_backend="apex" is refused by the tables whatever the precision: it is refused at run time beside 16.
    assert not rules.translated_at_run_time("amp_backend", "apex")
    with pytest.raises(ValueError):
        legacy_trainer_kwargs({"amp_backend": "apex", "precision": 16})
