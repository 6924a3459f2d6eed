"""``bench_starved_gpu``'s validation clock: only the validations inside the timed window are taken out."""

from __future__ import annotations

from benchmarks.bench_starved_gpu import validation_clock


def test_only_the_validation_time_inside_the_window_is_taken_out() -> None:
    clock = validation_clock()
    # One validation mid-run (1-2 s), one after the last training batch ended at 4 s (5-9 s), one straddling the start.
    clock.spans = [(1.0, 2.0), (5.0, 9.0), (-1.0, 0.5)]
    assert clock.seconds_between(0.0, 4.0) == 1.5
    assert clock.seconds_between(0.0, 10.0) == 5.5
    clock.spans.append((3.0, float("nan")))  # a validation that never ended (the fit stopped inside it)
    assert clock.seconds_between(0.0, 4.0) == 1.5
