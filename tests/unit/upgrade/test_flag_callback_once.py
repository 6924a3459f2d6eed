"""A 1.x flag that became a callback (``stochastic_weight_avg``, ``terminate_on_nan``) beside callbacks that hold that
callback already adds no second one (rules ``trainer-swa``, ``trainer-terminate-on-nan``): 1.x's Trainer added no
``StochasticWeightAveraging()`` where its callbacks held one (``_configure_swa_callbacks``, 1.2 to 1.6)."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.upgrade_check import upgraded

LISTED = """import pytorch_lightning as pl
from pytorch_lightning.callbacks import LearningRateMonitor, StochasticWeightAveraging


def runners(cfg):
    first = pl.Trainer(
        max_epochs=4,
        stochastic_weight_avg=True,
        callbacks=[LearningRateMonitor(), StochasticWeightAveraging(swa_lrs=0.02)],
    )
    second = pl.Trainer(
        stochastic_weight_avg=cfg.average, callbacks=[pl.callbacks.StochasticWeightAveraging(swa_lrs=0.3)]
    )
    return first, second
"""


def test_a_listed_swa_callback_takes_the_flags_place() -> None:
    out = upgraded(LISTED, no_todo=True, no_unmarked=True)
    assert "stochastic_weight_avg" not in out and "LegacyStochasticWeightAveraging" not in out, out
    assert "callbacks=[LearningRateMonitor(), StochasticWeightAveraging(swa_lrs=0.02)]," in out, out
    assert "(\n        callbacks=[pl.callbacks.StochasticWeightAveraging(swa_lrs=0.3)]\n    )" in out, out


NAN_GUARDED = """import lightning.pytorch as pl
from lightning_mgpu.callbacks import TerminateOnNaN


def runner():
    return pl.Trainer(terminate_on_nan=True, callbacks=[TerminateOnNaN()], max_epochs=2)
"""


def test_a_listed_terminate_on_nan_callback_takes_the_flags_place() -> None:
    out = upgraded(NAN_GUARDED, no_todo=True, no_unmarked=True)
    assert "pl.Trainer(callbacks=[TerminateOnNaN()], max_epochs=2)" in out, out


FROM_A_NAME = """import pytorch_lightning as pl


def runner(extra, opts):
    extra_callbacks = [*extra]
    plain = pl.Trainer(stochastic_weight_avg=True, callbacks=extra_callbacks)
    chosen = pl.Trainer(stochastic_weight_avg=opts.swa, callbacks=extra_callbacks)
    return plain, chosen
"""


def test_a_list_read_at_run_time_gets_the_callback_only_where_it_holds_none() -> None:
    """The converted calls, run: the callback is added where the list holds no StochasticWeightAveraging and the
    flag is true, as 1.x's Trainer did."""
    from pytorch_lightning.callbacks import LearningRateMonitor, StochasticWeightAveraging

    out = upgraded(FROM_A_NAME, no_todo=True, no_unmarked=True)
    assert "callbacks=[*extra_callbacks, *LegacyStochasticWeightAveraging.unless_given(extra_callbacks)]" in out, out
    namespace: dict[str, object] = {}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102
    namespace["pl"] = type("pl", (), {"Trainer": staticmethod(lambda **kwargs: kwargs["callbacks"])})

    class Opts:
        swa = True

    monitor, own = LearningRateMonitor(), StochasticWeightAveraging(swa_lrs=0.1)
    plain, chosen = namespace["runner"]([monitor], Opts)  # type: ignore[operator]
    for callbacks in (plain, chosen):
        assert callbacks[0] is monitor and [type(c).__name__ for c in callbacks[1:]] == [
            "LegacyStochasticWeightAveraging"
        ]
    plain, chosen = namespace["runner"]([monitor, own], Opts)  # type: ignore[operator]
    assert plain == [monitor, own] and chosen == [monitor, own]
    Opts.swa = False
    _, chosen = namespace["runner"]([monitor], Opts)  # type: ignore[operator]
    assert chosen == [monitor]


@pytest.mark.parametrize("given", [None, [], "single", "subclass"])
def test_unless_given_as_1x_configured_swa(given: object) -> None:
    """1.x: ``if not existing_swa: callbacks = [StochasticWeightAveraging()] + callbacks``; a subclass counts."""
    from lightning.pytorch.callbacks import StochasticWeightAveraging

    from lightning_mgpu.callbacks import LegacyStochasticWeightAveraging

    class Averaging(StochasticWeightAveraging):
        pass

    held = {"single": Averaging(swa_lrs=0.5), "subclass": [Averaging(swa_lrs=0.5)]}.get(str(given), given)
    added = LegacyStochasticWeightAveraging.unless_given(held)  # type: ignore[arg-type]
    if given in ("single", "subclass"):
        assert added == []
    else:
        assert [type(c) for c in added] == [LegacyStochasticWeightAveraging]


@pytest.mark.parametrize("namespace", ["lightning.pytorch", "pytorch_lightning"])
def test_settings_read_at_run_time_add_no_second_callback(namespace: str) -> None:
    """legacy_trainer_kwargs: a true flag beside callbacks holding the callback adds none; beside others, one."""
    import importlib

    from lightning_mgpu.upgrade.rules import BUNDLE_FOR_NAMESPACE
    from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs

    swa = importlib.import_module(f"{namespace}.callbacks").StochasticWeightAveraging(swa_lrs=0.2)
    guard = importlib.import_module(f"{BUNDLE_FOR_NAMESPACE[namespace]}.callbacks").TerminateOnNaN()
    settings = {"stochastic_weight_avg": True, "terminate_on_nan": True}
    out = legacy_trainer_kwargs(settings, namespace=namespace, callbacks=[swa, guard])
    assert out["callbacks"] == [swa, guard]
    out = legacy_trainer_kwargs(settings, namespace=namespace, callbacks=[swa])
    assert out["callbacks"][0] is swa and [type(c).__name__ for c in out["callbacks"][1:]] == ["TerminateOnNaN"]
