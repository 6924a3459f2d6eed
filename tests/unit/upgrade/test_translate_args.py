"""``lightning_mgpu.upgrade.translate_args`` (rule ``trainer-args-translated``): Trainer settings whose values this
tool cannot read move into ``**legacy_trainer_kwargs(...)``, translated when the Trainer is built as 1.x read them;
two literals that disagree stay a ``trainer-conflict`` TODO."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.upgrade_check import upgraded_result

FROM_ARGS = """from pytorch_lightning import Trainer


def build(args_trainer, monitor):
    trainer = Trainer(
        accelerator=args_trainer.accelerator,
        gpus=args_trainer.gpus,  # -1: every GPU
        max_epochs=args_trainer.max_epochs,
        progress_bar_refresh_rate=args_trainer.progress_bar_refresh_rate,
        weights_summary=args_trainer.weights_summary,
        callbacks=[monitor],
        precision=32,
        logger=False,
    )
    return trainer
"""

DICT = """import pytorch_lightning as pl


def build(args, callbacks):
    trainer_args = {
        "devices": args.devices,
        "accelerator": args.accelerator,
        "max_epochs": args.max_epochs,
        "callbacks": callbacks,
        "logger": False,
    }
    return pl.Trainer(**trainer_args)
"""


def upgraded(source: str) -> tuple[str, list[str]]:
    result = upgraded_result(source)
    return result.source, [f.rule for f in result.findings]


def test_the_call_moves_what_it_cannot_read_into_the_translation() -> None:
    out, found = upgraded(FROM_ARGS)
    assert found == ["trainer-args-translated"], out
    assert "TODO" not in out and unmarked(out) == []
    assert "from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs" in out
    lines = [line.strip() for line in out.splitlines()]
    assert lines[lines.index("**legacy_trainer_kwargs(") :][:8] == [
        "**legacy_trainer_kwargs(",
        "accelerator=args_trainer.accelerator,",
        "gpus=args_trainer.gpus,  # -1: every GPU",
        "progress_bar_refresh_rate=args_trainer.progress_bar_refresh_rate,",
        "weights_summary=args_trainer.weights_summary,",
        'namespace="pytorch_lightning",',
        "callbacks=[monitor],",
        "),",  # the call's own trailing comma
    ], out
    assert "max_epochs=args_trainer.max_epochs," in lines and "precision=32," in lines


def test_the_translation_builds_what_1x_built() -> None:
    """The converted function run on Lightning 2.x: accelerator="ddp_cpu" is ddp on CPU processes, a refresh rate
    of 0 hides the bar, weights_summary="full" is ModelSummary(max_depth=-1), beside the call's own callback."""
    pl = pytest.importorskip("pytorch_lightning")
    out, _ = upgraded(FROM_ARGS)
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)  # noqa: S102
    monitor = pl.callbacks.LearningRateMonitor()
    args = SimpleNamespace(
        accelerator="ddp_cpu", gpus=None, max_epochs=1, progress_bar_refresh_rate=0, weights_summary="full"
    )
    trainer = namespace["build"](args, monitor)  # type: ignore[operator]
    assert type(trainer.strategy).__name__ == "DDPStrategy" and type(trainer.accelerator).__name__ == "CPUAccelerator"
    assert trainer.progress_bar_callback is None
    summaries = [c for c in trainer.callbacks if isinstance(c, pl.callbacks.ModelSummary)]
    assert [s._max_depth for s in summaries] == [-1] and monitor in trainer.callbacks
    args = SimpleNamespace(accelerator="cpu", gpus=0, max_epochs=1, progress_bar_refresh_rate=5, weights_summary="top")
    trainer = namespace["build"](args, monitor)  # type: ignore[operator]
    assert type(trainer.accelerator).__name__ == "CPUAccelerator" and trainer.progress_bar_callback.refresh_rate == 5


def test_a_settings_dict_moves_them_too() -> None:
    out, found = upgraded(DICT)
    assert found == ["trainer-args-translated"], out
    assert "TODO" not in out and unmarked(out) == []
    lines = [line.strip() for line in out.splitlines()]
    assert lines[lines.index("**legacy_trainer_kwargs(") :][:5] == [
        "**legacy_trainer_kwargs(",
        "devices=args.devices,",
        "accelerator=args.accelerator,",
        'namespace="pytorch_lightning",',
        "),",
    ], out
    assert '"callbacks": callbacks,' in lines  # no moved setting adds a callback: the list stays where it was
    pl = pytest.importorskip("pytorch_lightning")
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)  # noqa: S102
    args = SimpleNamespace(devices=1, accelerator="cpu", max_epochs=1)
    trainer = namespace["build"](args, [])  # type: ignore[operator]
    assert isinstance(trainer, pl.Trainer) and type(trainer.accelerator).__name__ == "CPUAccelerator"


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ('t = Trainer(accelerator="ddp", strategy="ddp_spawn")\n', "trainer-conflict"),  # two literals: a person's
        # Literals that disagree beside a value it cannot read: still the person's choice.
        (
            't = Trainer(accelerator="ddp", strategy="ddp_spawn", progress_bar_refresh_rate=args.r)\n',
            "trainer-conflict",
        ),
    ],
)
def test_what_a_translation_does_not_settle_keeps_its_todo(source: str, rule: str) -> None:
    out, found = upgraded(source)
    assert "legacy_trainer_kwargs" not in out and f"TODO(lightning-mgpu:{rule})" in out, out
    assert "trainer-args-translated" not in found


def test_legacy_trainer_kwargs_takes_keywords() -> None:
    from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs

    assert legacy_trainer_kwargs({"max_epochs": 2}, accelerator="ddp", gpus=2) == {
        "max_epochs": 2,
        "strategy": "ddp",
        "accelerator": "gpu",
        "devices": 2,
    }
    with pytest.raises(ValueError, match="given twice"):
        legacy_trainer_kwargs({"gpus": 1}, gpus=2)
    with pytest.raises(ValueError, match="weights_summary='some'"):
        legacy_trainer_kwargs(weights_summary="some")


def test_an_argument_that_leaves_the_call_with_its_todo_does_not_change_the_decision() -> None:
    """auto_scale_batch_size= leaves the call with its TODO: the first run translates the rest as the second run,
    which no longer sees it, would (the same output twice)."""
    out, found = upgraded("t = Trainer(accelerator=cfg.accelerator, auto_scale_batch_size=cfg.scale, max_epochs=2)\n")
    assert "trainer-args-translated" in found and "TODO(lightning-mgpu:trainer-auto-scale-batch-size)" in out
    translation = 'legacy_trainer_kwargs(accelerator=cfg.accelerator, namespace="pytorch_lightning")'
    assert out.endswith(f"t = Trainer(max_epochs=2, **{translation})\n"), out


PLUGIN_BESIDE_UNREAD = """import pytorch_lightning as pl
from pytorch_lightning.plugins import DDPPlugin


def make_trainer(opts, saver):
    return pl.Trainer(
        gpus=opts.gpus,
        accelerator=opts.accelerator,
        max_epochs=opts.epochs,
        plugins=DDPPlugin(find_unused_parameters=False),
        weights_summary="top",
        callbacks=[saver],
    )
"""

PLUGIN_LIST_BESIDE_RATE = """from pytorch_lightning import Trainer
from pytorch_lightning.plugins import DDPPlugin


def make_trainer(opts, saver):
    return Trainer(max_epochs=opts.epochs,
                   callbacks=[saver],
                   weights_summary=None,
                   progress_bar_refresh_rate=opts.refresh,
                   gpus=opts.n_gpus,
                   accelerator="ddp" if opts.n_gpus > 1 else None,
                   plugins=[DDPPlugin(find_unused_parameters=False)])
"""


@pytest.mark.parametrize("source", [PLUGIN_BESIDE_UNREAD, PLUGIN_LIST_BESIDE_RATE])
def test_a_ddp_plugin_beside_unread_values_is_translated_in_the_first_run(source: str) -> None:
    """plugins=DDPPlugin(...) beside values this tool cannot read: the first run writes what the second run wrote
    (the plugin as strategy=DDPStrategy(...), moved into the translation with the rest), with no TODO."""
    out, found = upgraded(source)  # asserts that a second run changes nothing
    assert "trainer-args-translated" in found and "TODO" not in out and unmarked(out) == [], out
    assert "strategy=DDPStrategy(find_unused_parameters=False)," in out and "plugins" not in out, out
    pl = pytest.importorskip("pytorch_lightning")
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)  # noqa: S102
    saver = pl.callbacks.LearningRateMonitor()
    for accelerator in ("ddp", "cpu", None):
        opts = SimpleNamespace(gpus=None, n_gpus=0, accelerator=accelerator, epochs=1, refresh=3)
        trainer = namespace["make_trainer"](opts, saver)  # type: ignore[operator]
        # 1.x: the plugin object was the strategy (accelerator="ddp" only named its family), on the CPU here.
        assert type(trainer.strategy).__name__ == "DDPStrategy" and trainer.strategy._ddp_kwargs == {
            "find_unused_parameters": False
        }
        assert type(trainer.accelerator).__name__ == "CPUAccelerator" and saver in trainer.callbacks
    if "refresh" in source:
        assert trainer.progress_bar_callback.refresh_rate == 3


PLUGINS_FROM_THE_COMMAND_LINE = """import pytorch_lightning as pl


def make_trainer(cli, hooks):
    return pl.Trainer(
        callbacks=hooks,
        max_epochs=1,
        plugins=cli.plugins,
        progress_bar_refresh_rate=1 if cli.bar else 0,
    )
"""


def test_plugins_this_tool_cannot_read_move_into_the_translation_beside_the_rest() -> None:
    """plugins=cli.plugins (None, a 1.x strategy name or a list of plugins, as the run gives it) beside a refresh
    rate this tool cannot read: both move into the translation, which takes a strategy out of plugins= as 1.x's
    accelerator connector did (it was a TODO beside the refresh rate)."""
    out, found = upgraded(PLUGINS_FROM_THE_COMMAND_LINE)
    assert found == ["trainer-args-translated"] and "TODO" not in out and unmarked(out) == [], out
    assert "plugins=cli.plugins," in out and "legacy_trainer_kwargs(" in out, out
    pl = pytest.importorskip("pytorch_lightning")
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)  # noqa: S102
    saver = pl.callbacks.LearningRateMonitor()
    trainer = namespace["make_trainer"](SimpleNamespace(plugins=None, bar=False), [saver])  # type: ignore[operator]
    assert trainer.progress_bar_callback is None and saver in trainer.callbacks
    trainer = namespace["make_trainer"](SimpleNamespace(plugins="ddp_spawn", bar=True), [saver])  # type: ignore[operator]
    assert type(trainer.strategy).__name__ == "DDPStrategy" and trainer.strategy._start_method == "spawn"
    assert trainer.progress_bar_callback.refresh_rate == 1
    # An accelerator this tool cannot read beside a plugins list: translated too (it was an accelerator-unknown TODO).
    out, found = upgraded("t = Trainer(accelerator=args.accelerator, plugins=[plugin])\n")
    assert found == ["trainer-args-translated"] and "TODO" not in out, out
    assert "legacy_trainer_kwargs(accelerator=args.accelerator, plugins=[plugin]," in out, out
