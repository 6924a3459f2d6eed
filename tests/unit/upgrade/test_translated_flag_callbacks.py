"""A 1.x flag that became one of the bundle's callbacks (``terminate_on_nan``, ``stochastic_weight_avg``), given a
value the tool cannot read, moves into ``legacy_trainer_kwargs(...)`` where the call is translated at run time anyway
(rule ``trainer-args-translated``): the callback is added when the value is true, as 1.x's flag added its check,
instead of the flag's TODO."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.upgrade_check import upgraded

WORKER_SETTINGS = """import pytorch_lightning as pl


def make_runner(opts, hooks):
    settings = {
        "accelerator": opts.backend,
        "gpus": opts.devices,
        "callbacks": hooks,
        "max_epochs": opts.epochs,
        "terminate_on_nan": opts.stop_on_nan,
    }
    return pl.Trainer(**settings)
"""


def test_the_flag_moves_into_the_translation_and_adds_the_callback_when_true() -> None:
    out = upgraded(WORKER_SETTINGS, no_todo=True, no_unmarked=True)
    assert "terminate_on_nan=opts.stop_on_nan" in out and "legacy_trainer_kwargs(" in out, out
    received: dict[str, object] = {}
    namespace: dict[str, object] = {}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102
    namespace["pl"] = type("pl", (), {"Trainer": staticmethod(lambda **kwargs: received.update(kwargs))})

    class Opts:
        backend, devices, epochs, stop_on_nan = "ddp", 2, 3, True

    namespace["make_runner"](Opts, ["hook"])  # type: ignore[operator]
    callbacks = received.pop("callbacks")
    assert received == {"strategy": "ddp", "accelerator": "gpu", "devices": 2, "max_epochs": 3}
    assert isinstance(callbacks, list) and callbacks[0] == "hook"
    assert [type(c).__name__ for c in callbacks[1:]] == ["TerminateOnNaN"]
    Opts.stop_on_nan = False  # 1.x's default: no check, no callback
    received.clear()
    namespace["make_runner"](Opts, ["hook"])  # type: ignore[operator]
    assert received["callbacks"] == ["hook"]


def test_the_scan_takes_a_1x_backend_name_inside_the_translation() -> None:
    """legacy_trainer_kwargs(accelerator="horovod", ...) translates the 1.x spelling when the Trainer is built: no
    leftover there, while a Trainer call that still spells it is one."""
    from lightning_mgpu.upgrade.leftovers import unmarked

    assert unmarked("kw = dict(max_epochs=2, **legacy_trainer_kwargs(accelerator='horovod', gpus=n))\n") == []
    assert unmarked("t = Trainer(accelerator='horovod', gpus=n)\n") != []


BESIDE_A_SPLAT = """import pytorch_lightning as pl


def make_runner(box, hooks, extra):
    refresh = box.refresh_every
    return pl.Trainer(
        max_epochs=box.epochs,
        callbacks=hooks,
        progress_bar_refresh_rate=refresh,
        terminate_on_nan=box.guard_nan,
        **extra,
    )
"""


def test_settings_beside_a_translated_splat_go_into_its_translation() -> None:
    """progress_bar_refresh_rate= and terminate_on_nan= with values the tool cannot read, beside a splat that goes
    into legacy_trainer_kwargs: they go in as keywords, and the translation adds their callbacks as 1.x's flags
    did (a rate of 0 hides the bar); a key also in the splat is refused, as 1.x's call refused it."""
    out = upgraded(BESIDE_A_SPLAT, no_todo=True, no_unmarked=True)
    assert "progress_bar_refresh_rate=refresh, terminate_on_nan=box.guard_nan" in out, out
    received: dict[str, object] = {}
    namespace: dict[str, object] = {}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102
    namespace["pl"] = type("pl", (), {"Trainer": staticmethod(lambda **kwargs: received.update(kwargs))})

    class Box:
        epochs, refresh_every, guard_nan = 2, 7, True

    namespace["make_runner"](Box, ["hook"], {"gpus": 1})  # type: ignore[operator]
    callbacks = received.pop("callbacks")
    assert received == {"max_epochs": 2, "accelerator": "gpu", "devices": 1}
    assert [type(c).__name__ for c in callbacks] == ["str", "TQDMProgressBar", "TerminateOnNaN"]  # type: ignore[attr-defined]
    assert callbacks[1].refresh_rate == 7  # type: ignore[index]
    Box.refresh_every, Box.guard_nan = 0, False
    received.clear()
    namespace["make_runner"](Box, ["hook"], {})  # type: ignore[operator]
    assert received == {"max_epochs": 2, "callbacks": ["hook"], "enable_progress_bar": False}
    with pytest.raises(ValueError, match="given twice"):
        namespace["make_runner"](Box, ["hook"], {"terminate_on_nan": True})  # type: ignore[operator]


SWA_FROM_CONFIG = """import pytorch_lightning as pl


def fit_digits(settings, net, digits, monitor):
    runner = pl.Trainer(
        max_epochs=settings.epochs,
        stochastic_weight_avg=settings.average,
        callbacks=[monitor],
    )
    runner.fit(net, digits)
"""


@pytest.mark.parametrize("average", [True, False, 0, "yes"])
def test_a_flag_read_at_run_time_adds_its_callback_when_true(average: object) -> None:
    """stochastic_weight_avg=settings.average (no translation in the call): the callback joins callbacks= when the
    value is true, as 1.x's Trainer added StochasticWeightAveraging() for a true flag."""
    out = upgraded(SWA_FROM_CONFIG, no_todo=True, no_unmarked=True)
    assert "*([LegacyStochasticWeightAveraging()] if settings.average else [])" in out, out
    received: dict[str, object] = {}
    namespace: dict[str, object] = {}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102

    class Runner:
        def __init__(self, **kwargs: object) -> None:
            received.update(kwargs)

        def fit(self, *args: object) -> None:
            pass

    namespace["pl"] = type("pl", (), {"Trainer": Runner})

    class Settings:
        epochs = 1

    Settings.average = average  # type: ignore[attr-defined]
    namespace["fit_digits"](Settings, None, None, "monitor")  # type: ignore[operator]
    names = [type(c).__name__ for c in received["callbacks"]]  # type: ignore[attr-defined]
    assert names == (["str", "LegacyStochasticWeightAveraging"] if average else ["str"])
