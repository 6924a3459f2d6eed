"""``lightning_mgpu.upgrade.tuner`` (rule ``tuner``): trainer.tuner.lr_find / scale_batch_size -> Tuner(trainer), with
1.x's ``update_attr=False``, where the result went kept."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.tiny import tiny_module
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

SCRIPT = """import pytorch_lightning as pl


def tune_and_fit(model, train_loader, val_loader):
    trainer = pl.Trainer(max_epochs=3)
    lr_finder = trainer.tuner.lr_find(model, train_dataloader=train_loader, val_dataloaders=val_loader)
    model.hparams.lr = lr_finder.suggestion()
    new_batch_size = trainer.tuner.scale_batch_size(model, mode="binsearch")
    trainer.fit(model, train_loader, val_loader)
"""


def test_the_tuner_moves_out_of_the_trainer() -> None:
    out = upgraded(SCRIPT)
    lines = [line.strip() for line in out.splitlines()]
    assert "from pytorch_lightning.tuner import Tuner" in lines
    assert (
        "lr_finder = Tuner(trainer).lr_find(model, train_dataloaders=train_loader, val_dataloaders=val_loader,"
        " update_attr=False)" in lines
    )
    assert "model.hparams.lr = lr_finder.suggestion()" in lines  # where the result went stays
    assert 'new_batch_size = Tuner(trainer).scale_batch_size(model, mode="binsearch")' in lines
    assert unmarked(out) == []


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("self.trainer.lr_find(model)", "Tuner(self.trainer).lr_find(model, update_attr=False)"),
        ("trainer.tuner.lr_find(model, update_attr=True)", "Tuner(trainer).lr_find(model, update_attr=True)"),
        ("loader.tuner.lr_find(model)", "loader.tuner.lr_find(model)"),  # not a trainer
        ("trainer.tuner.lr_find(model, a, b, dm)", "trainer.tuner.lr_find(model, a, b, dm)"),  # 2.x's order differs
    ],
)
def test_tuner_calls(before: str, after: str) -> None:
    out = upgraded(f"import lightning.pytorch as pl\nx = {before}\n")
    assert out.endswith(f"x = {after}\n")
    assert ("from lightning.pytorch.tuner import Tuner\n" in out) == after.startswith("Tuner(")


def test_the_converted_call_runs_on_lightning_2(tmp_path) -> None:
    """The rewritten finder runs on this Lightning (a few steps on the CPU) and leaves the model's lr alone."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    source = upgraded(
        "def find(trainer, model, loader):\n    return trainer.tuner.lr_find(model, loader, num_training=5)\n"
    )
    namespace: dict[str, object] = {}
    exec(compile("from pytorch_lightning.tuner import Tuner\n" + source, "converted", "exec"), namespace)  # noqa: S102
    # The model subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
    trainer = quiet_trainer("pytorch_lightning", max_epochs=1, default_root_dir=tmp_path)
    model = tiny_module("pytorch_lightning", features=4, lr=0.5)
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
    finder = namespace["find"](trainer, model, loader)  # type: ignore[operator]
    assert finder is not None and model.lr == 0.5  # update_attr=False, as 1.x


# -- auto_lr_find= / auto_scale_batch_size= and trainer.tune(): rules tuner-flags and tuner-flags-unused -------------

FLAGS_SCRIPT = """import pytorch_lightning as pl

model = Model()
trainer = pl.Trainer(max_epochs=10, auto_lr_find=True, auto_scale_batch_size="binsearch")
trainer.tune(model, train_dataloader=loader)
trainer.fit(model)


def main(config, model, data):
    trainer = pl.Trainer(max_epochs=config.max_epochs, auto_lr_find=config.auto_lr)
    if config.auto_lr:
        trainer.tune(model, data)
    trainer.fit(model, data)


def named(model):
    trainer = pl.Trainer(auto_lr_find="my_lr", auto_scale_batch_size=flags.scale)
    trainer.tune(model)
    trainer.fit(model)


def explicit_finder(model, loader):
    trainer = pl.Trainer(max_epochs=3, auto_lr_find=True)
    trainer.logger.log_hyperparams({})
    finder = trainer.tuner.lr_find(model, loader)
    trainer.fit(model, loader)
"""


def test_tune_becomes_the_tuner_calls_its_flags_asked_for() -> None:
    result = upgrade_source(FLAGS_SCRIPT)
    out = result.source
    assert upgrade_source(out).source == out, "a second run changed something"
    lines = [line.strip() for line in out.splitlines()]
    assert "from pytorch_lightning.tuner import Tuner" in lines
    assert "trainer = pl.Trainer(max_epochs=10)" in lines
    # 1.x's order: the batch size first, then the learning rate.
    start = lines.index('Tuner(trainer).scale_batch_size(model, train_dataloaders=loader, mode="binsearch")')
    assert lines[start + 1] == "Tuner(trainer).lr_find(model, train_dataloaders=loader)"
    # A flag this tool cannot read: under its own if, unless the tune() call already sits alone under that if.
    at = lines.index("if config.auto_lr:")
    assert lines[at + 1] == (
        'Tuner(trainer).lr_find(model, data, attr_name=config.auto_lr if isinstance(config.auto_lr, str) else "")'
    )
    assert lines.count("if config.auto_lr:") == 1
    at = lines.index("if flags.scale:")
    assert lines[at + 1] == (
        'Tuner(trainer).scale_batch_size(model, mode=flags.scale if isinstance(flags.scale, str) else "power")'
    )
    assert lines[at + 2] == 'Tuner(trainer).lr_find(model, attr_name="my_lr")'
    # trainer.tuner.lr_find() ran the finder whatever the flag said, and tune() is never called: the flag goes.
    assert "trainer = pl.Trainer(max_epochs=3)" in lines
    assert "TODO" not in out and unmarked(out) == []
    found = [f.rule for f in result.findings]
    assert found.count("tuner-flags") == 6 and "tuner-flags-unused" in found
    assert any(f.note and f.rule == "tuner-flags-unused" for f in result.findings)


@pytest.mark.parametrize(
    "source",
    [
        # The trainer leaves the function: a caller may tune it.
        "def build():\n    trainer = pl.Trainer(auto_lr_find=True)\n    return trainer\n",
        "def build(registry):\n    trainer = pl.Trainer(auto_lr_find=True)\n    registry.add(trainer)\n",
        # A nested function tunes it; tune()'s result is used; its kwargs dicts; two tune() calls.
        "def f(m):\n    trainer = pl.Trainer(auto_lr_find=True)\n    def g():\n        trainer.tune(m)\n    g()\n",
        "def f(m):\n    trainer = pl.Trainer(auto_lr_find=True)\n    result = trainer.tune(m)\n",
        "def f(m):\n    trainer = pl.Trainer(auto_lr_find=True)\n    trainer.tune(m, lr_find_kwargs={'min_lr': 1})\n",
        "def f(m):\n    trainer = pl.Trainer(auto_lr_find=True)\n    trainer.tune(m)\n    trainer.tune(m)\n",
        # At module level another module may import the trainer and tune it (a file that does not run it itself).
        "trainer = pl.Trainer(auto_lr_find=True)\ntrainer.logger.log_hyperparams({})\n",
        # from_argparse_args whose trainer leaves the function: its tune() may run elsewhere.
        "def f(args):\n    trainer = pl.Trainer.from_argparse_args(args, auto_lr_find=True)\n    return trainer\n",
    ],
)
def test_where_the_flags_may_still_run_their_todo_stays(source: str) -> None:
    out = upgraded("import pytorch_lightning as pl\n" + source)
    assert "TODO(lightning-mgpu:trainer-auto-lr-find)" in out, out
    assert "from pytorch_lightning.tuner import Tuner" not in out


def test_a_script_that_runs_its_module_level_trainer_without_tune_drops_the_flag() -> None:
    """A script (a real held-out file's shape) builds its Trainer at module level with ``auto_lr_find=True`` and only
    validates: 1.x's validate() never read the flag (only tune() did), and importing the file would run it."""
    out = upgraded(
        "import pytorch_lightning as pl\ntrainer = pl.Trainer(max_epochs=5, auto_lr_find=True)\n"
        "trainer.validate(model=net, datamodule=data)\n"
    )
    assert "trainer = pl.Trainer(max_epochs=5)" in out and "NOTE(lightning-mgpu:tuner-flags-unused)" in out
    assert "TODO" not in out and unmarked(out) == []


def test_an_off_flag_is_dropped_with_a_note() -> None:
    out = upgraded(
        "import pytorch_lightning as pl\ndef f():\n    return pl.Trainer(auto_lr_find=False, max_epochs=2)\n"
    )
    assert "return pl.Trainer(max_epochs=2)" in out and "NOTE(lightning-mgpu:tuner-flags-unused)" in out


def test_the_converted_tune_sets_the_learning_rate_as_1x_did(tmp_path) -> None:
    """auto_lr_find=True and tune(): the converted script's finder sets model.lr on this Lightning (update_attr, as
    1.x's tune() did)."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    source = upgraded(
        "import pytorch_lightning as pl\n"
        "def tune(model, loader, root):\n"
        "    trainer = pl.Trainer(auto_lr_find=True, max_epochs=1, logger=False, enable_progress_bar=False,"
        " default_root_dir=root, accelerator='cpu')\n"
        "    trainer.tune(model, loader)\n"
    )
    assert "Tuner(trainer).lr_find(model, loader)" in source
    pl.seed_everything(7)  # data the finder finds a steepest descent on, every run
    namespace: dict[str, object] = {}
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    model = tiny_module("pytorch_lightning", features=4, lr=0.5)
    loader = DataLoader(TensorDataset(torch.randn(512, 4)), batch_size=4)  # 128 batches: the finder's 100 steps
    namespace["tune"](model, loader, str(tmp_path))  # type: ignore[operator]
    assert model.lr != 0.5  # the finder's suggestion, set as 1.x's tune() set it


def test_flags_written_in_from_argparse_args_are_dropped_where_nothing_runs_them() -> None:
    """Trainer.from_argparse_args(args, auto_lr_find=True, ...) and no tune() anywhere: 1.x's fit() never read it."""
    out = upgraded(
        "import pytorch_lightning as pl\n"
        "def run(opts, module):\n"
        "    trainer = pl.Trainer.from_argparse_args(opts, auto_lr_find=True, max_epochs=1)\n"
        "    trainer.fit(module)\n"
    )
    assert "trainer = from_argparse_args(pl.Trainer, opts, max_epochs=1)" in out, out
    assert "NOTE(lightning-mgpu:tuner-flags-unused)" in out and "TODO" not in out and unmarked(out) == []


TUNE_RESULT = """import pytorch_lightning as pl


class Runner:
    def __init__(self, settings):
        self.trainer = pl.Trainer(**settings)

    def search(self, model, loader, wanted):
        if wanted:
            found = self.trainer.tune(model, train_dataloaders=loader)
            return f"suggested {found['lr_find'].suggestion()}"
        return None
"""


def test_a_tune_result_read_by_its_keys_becomes_the_dict_of_the_tuner_calls(tmp_path) -> None:
    """result = trainer.tune(...) read as result["lr_find"], the flags in a config: the dict 1.x's tune() returned,
    built by Tuner(trainer).lr_find(...), which sets the learning rate as 1.x's tune() did."""
    out = upgraded(TUNE_RESULT)
    assert 'found = {"lr_find": Tuner(self.trainer).lr_find(model, train_dataloaders=loader)}' in out, out
    assert "TODO" not in out and unmarked(out) == [] and "from pytorch_lightning.tuner import Tuner" in out
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    pl.seed_everything(7)
    namespace: dict[str, object] = {}
    exec(compile(out, "converted", "exec"), namespace)  # noqa: S102
    settings = {"max_epochs": 1, "logger": False, "enable_progress_bar": False, "default_root_dir": str(tmp_path)}
    runner = namespace["Runner"](settings)  # type: ignore[operator]
    model = tiny_module("pytorch_lightning", features=4, lr=0.5)
    loader = DataLoader(TensorDataset(torch.randn(512, 4)), batch_size=4)
    text = runner.search(model, loader, True)
    assert text.startswith("suggested ") and model.lr != 0.5 and float(text.split()[1]) == model.lr


@pytest.mark.parametrize(
    "use",
    [
        "    print(found)\n",  # the whole result: which keys it held, only the run knows
        "    print(found['lr_find'], found.get('scale_batch_size'))\n",
        "    print(found[key])\n",
    ],
)
def test_other_uses_of_a_tune_result_keep_the_todo(use: str) -> None:
    out = upgraded(
        "import pytorch_lightning as pl\ndef f(trainer, model, key):\n    found = trainer.tune(model)\n" + use
    )
    assert "TODO(lightning-mgpu:trainer-tune)" in out and "    found = trainer.tune(model)\n" in out, out


def test_a_flag_that_is_a_comparison_names_no_attribute() -> None:
    """``auto_lr_find=cfg.lr == 0`` (a reserve file of the fourth held-out draw) is on or off, never an attribute's
    name: the finder runs under the same test, on the default attribute, without an ``isinstance(..., str)`` guard."""
    out = upgraded(
        "import pytorch_lightning as pl\n"
        "def main(cfg, model, data):\n"
        "    trainer = pl.Trainer(max_epochs=1, auto_lr_find=cfg.lr == 0)\n"
        "    trainer.tune(model, datamodule=data)\n"
        "    trainer.fit(model, datamodule=data)\n"
    )
    assert "    if cfg.lr == 0:\n        Tuner(trainer).lr_find(model, datamodule=data)\n" in out, out


def test_flags_of_a_trainer_assigned_in_each_branch_are_dropped_where_nothing_tunes_it() -> None:
    """A script (a real file's shape) builds its trainer in each branch of an if, with the flags on, and only fits
    it: 1.x's fit() never read them, and no binding of the name reaches a tune() or leaves the script."""
    out = upgraded(
        "import pytorch_lightning as pl\n"
        "if __name__ == '__main__':\n"
        "    if settings.fresh:\n"
        "        runner = pl.Trainer(max_epochs=4, auto_lr_find=True, auto_scale_batch_size='binsearch')\n"
        "        runner.fit(net, data)\n"
        "    else:\n"
        "        runner = pl.Trainer(auto_scale_batch_size='binsearch', benchmark=True)\n"
        "        runner.fit(net, data)\n"
    )
    assert "runner = pl.Trainer(max_epochs=4)" in out and "runner = pl.Trainer(benchmark=True)" in out, out
    assert out.count("NOTE(lightning-mgpu:tuner-flags-unused)") == 2
    assert "TODO" not in out and unmarked(out) == []


@pytest.mark.parametrize(
    "other",
    [
        "        runner = pl.Trainer(max_epochs=1)\n    runner.tune(net)\n",  # a tune() any binding may reach
        "        runner = pl.Trainer(max_epochs=1)\n    keep(runner)\n",  # handed on
    ],
)
def test_flags_stay_where_another_binding_of_the_name_is_tuned_or_handed_on(other: str) -> None:
    out = upgraded(
        "import pytorch_lightning as pl\ndef run(net, fresh):\n"
        "    if fresh:\n        runner = pl.Trainer(auto_lr_find=True)\n    else:\n" + other
    )
    assert "TODO(lightning-mgpu:trainer-auto-lr-find)" in out, out


# -- trainer.tune() of a Trainer.from_argparse_args trainer: rule tuner-flags-read -------------------------------------

PARSED = """import argparse
from pytorch_lightning import Trainer


def main(opts: argparse.Namespace, net, data):
    runner: Trainer = Trainer.from_argparse_args(opts, max_epochs=2)
    if opts.auto_lr_find or opts.auto_scale_batch_size:
        runner.tune(net, datamodule=data)
    runner.fit(net, data)
"""


def test_the_tune_of_a_trainer_built_from_parsed_flags_reads_them() -> None:
    out = upgraded(PARSED, no_todo=True, no_unmarked=True)
    assert "        legacy_tune(runner, net, datamodule=data)\n" in out, out
    assert "from lightning_mgpu.upgrade.tuning import legacy_tune\n" in out
    assert "runner: Trainer = from_argparse_args(Trainer, opts, max_epochs=2)" in out


def test_each_branch_may_build_the_trainer_from_the_parsed_flags() -> None:
    out = upgraded(
        "import pytorch_lightning as pl\n"
        "if __name__ == '__main__':\n"
        "    if resume:\n        t = pl.Trainer.from_argparse_args(cli, logger=log)\n"
        "    else:\n        t = pl.Trainer.from_argparse_args(cli)\n"
        "    if cli.tuning:\n        t.tune(net, loader, val_loader)\n    t.fit(net, loader)\n",
        no_todo=True,
        no_unmarked=True,
    )
    assert "        legacy_tune(t, net, loader, val_loader)\n" in out, out


@pytest.mark.parametrize(
    "other",
    [
        "    else:\n        trainer = pl.Trainer(max_epochs=1)\n",  # a Trainer that does not keep the parsed flags
        "    keep(trainer)\n",  # handed on: another function may set its flags
        "    trainer.auto_lr_find = False\n",  # 1.x's attribute, changed
    ],
)
def test_where_another_trainer_or_use_may_reach_the_tune_its_todo_stays(other: str) -> None:
    out = upgraded(
        "import pytorch_lightning as pl\ndef run(cli, net):\n"
        "    if cli.a:\n        trainer = pl.Trainer.from_argparse_args(cli)\n" + other + "    trainer.tune(net)\n"
    )
    assert "TODO(lightning-mgpu:trainer-tune)" in out and "legacy_tune" not in out, out


def test_legacy_tune_runs_the_tuners_the_flags_turned_on_in_1x_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """1.9's Tuner._tune: scale_batch_size (the flag's string is the mode) then lr_find (update_attr=True, the flag's
    string the attribute), for the flags that are on; 1.x's dict of their results; nothing with both off."""
    import argparse

    import pytorch_lightning as pl
    import pytorch_lightning.tuner

    from lightning_mgpu.upgrade.trainer_args import from_argparse_args
    from lightning_mgpu.upgrade.tuning import legacy_tune

    calls: list[tuple[str, tuple, dict]] = []

    class Recording:
        def __init__(self, trainer: object) -> None:
            self.trainer = trainer

        def scale_batch_size(self, *args: object, **kwargs: object) -> int:
            calls.append(("scale_batch_size", args, kwargs))
            return 64

        def lr_find(self, *args: object, **kwargs: object) -> str:
            calls.append(("lr_find", args, kwargs))
            return "finder"

    monkeypatch.setattr(pytorch_lightning.tuner, "Tuner", Recording)
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "accelerator": "cpu"}
    flags = argparse.Namespace(auto_lr_find="my_lr", auto_scale_batch_size="binsearch", max_epochs=1)
    trainer = from_argparse_args(pl.Trainer, flags, **quiet)  # 2.x's Trainer takes neither flag: kept beside it
    result = legacy_tune(trainer, "model", datamodule="dm", lr_find_kwargs={"num_training": 5})
    loaders = {"train_dataloaders": None, "val_dataloaders": None, "datamodule": "dm"}
    assert calls == [
        ("scale_batch_size", ("model",), {**loaders, "mode": "binsearch"}),
        ("lr_find", ("model",), {**loaders, "num_training": 5, "update_attr": True, "attr_name": "my_lr"}),
    ]
    assert result == {"scale_batch_size": 64, "lr_find": "finder"}
    calls.clear()
    trainer = from_argparse_args(
        pl.Trainer, argparse.Namespace(auto_lr_find=True, auto_scale_batch_size=False), **quiet
    )
    assert legacy_tune(trainer, "model") == {"lr_find": "finder"} and calls[0][2]["update_attr"] is True
    assert "attr_name" not in calls[0][2]  # True: lr or learning_rate, as 1.x found them
    calls.clear()
    off = from_argparse_args(pl.Trainer, argparse.Namespace(auto_lr_find=False), **quiet)
    assert legacy_tune(off, "model") == {} and legacy_tune(pl.Trainer(**quiet), "model") == {} and calls == []


def test_the_converted_parsed_tune_sets_the_learning_rate_as_1x_did(tmp_path) -> None:
    """End to end on this Lightning: --auto_lr_find on the command line, the converted script's legacy_tune runs the
    finder and sets model.lr, as 1.x's tune() did."""
    import argparse

    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    source = upgraded(
        "import pytorch_lightning as pl\n"
        "def tune(opts, model, loader):\n"
        "    trainer = pl.Trainer.from_argparse_args(opts)\n"
        "    trainer.tune(model, loader)\n",
        no_todo=True,
    )
    pl.seed_everything(7)
    namespace: dict[str, object] = {}
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    model = tiny_module("pytorch_lightning", features=4, lr=0.5)
    opts = argparse.Namespace(
        auto_lr_find=True, max_epochs=1, logger=False, enable_progress_bar=False, accelerator="cpu",
        default_root_dir=str(tmp_path),
    )  # fmt: skip
    namespace["tune"](opts, model, DataLoader(TensorDataset(torch.randn(512, 4)), batch_size=4))  # type: ignore[operator]
    assert model.lr != 0.5
