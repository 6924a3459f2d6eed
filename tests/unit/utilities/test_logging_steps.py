"""``is_logging_step``: Lightning's rule for which batches' ``on_step`` values reach the loggers, plus the last."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lightning_mgpu.utilities.logging_steps import batches_that_stepped, is_logging_step


def _trainer(stepped: int, every: int = 50, global_step: int | None = None, **kwargs: Any) -> Any:
    state = {"log_every_n_steps": every, "max_steps": -1, "is_last_batch": False, "should_stop": False} | kwargs
    loop = SimpleNamespace(epoch_loop=SimpleNamespace(_batches_that_stepped=stepped))
    return SimpleNamespace(fit_loop=loop, global_step=stepped if global_step is None else global_step, **state)


def test_every_nth_batch_that_steps() -> None:
    assert [s for s in range(12) if is_logging_step(_trainer(s, every=4))] == [3, 7, 11]
    assert batches_that_stepped(_trainer(7)) == 7


def test_the_last_batch_of_an_epoch_or_the_fit_and_a_stop() -> None:
    assert is_logging_step(_trainer(5, is_last_batch=True))
    assert is_logging_step(_trainer(5, should_stop=True))
    assert is_logging_step(_trainer(9, max_steps=10)) and not is_logging_step(_trainer(8, max_steps=10))
    # max_steps counts optimizer steps: with two optimizers global_step runs twice as fast as the batches.
    assert is_logging_step(_trainer(4, global_step=9, max_steps=10))


def test_log_every_n_steps_zero_logs_nothing() -> None:
    assert not is_logging_step(_trainer(0, every=0, is_last_batch=True))
