"""bench_ddp's decomposition of DDP's communication time, on fixed rounds (seconds per step). No timing is measured."""

from __future__ import annotations

import pytest

from benchmarks import bench_ddp
from benchmarks.bench_ddp import (
    AROUND_BODY,
    BOOKKEEPING,
    BUCKETED,
    EFFICIENCY,
    EFFICIENCY_VIEW,
    HIDDEN,
    IN_BODY,
    communication_figures,
    overhead_figures,
)


def _rounds(**arms: list[float]) -> dict[str, list[float]]:
    return {k: [v * 1e-3 for v in values] for k, values in arms.items()}  # given in ms


def test_figures_split_the_exposed_communication_into_its_parts() -> None:
    # no-sync 13 ms; DDP's bookkeeping +1.5 ms; its bucketed all-reduce 9 ms of exposed time where one flat call takes
    # 6 ms; a blocking hook (no overlap) would take 3 ms more than DDP.
    figures = communication_figures(
        _rounds(
            raw=[23.5, 23.5, 23.5],
            raw_no_sync=[13, 13, 13],
            raw_no_comm=[14.5, 14.5, 14.5],
            raw_blocking=[26.5, 26.5, 26.5],
            raw_bucket_view=[20, 20, 20],
            allreduce=[6, 6, 6],
        )
    )
    assert figures[EFFICIENCY] == pytest.approx(10.5 / 6)
    assert figures[BOOKKEEPING] == pytest.approx(1.5)
    assert figures[BUCKETED] == pytest.approx(9 / 6)
    assert figures[HIDDEN] == pytest.approx(3 / 6)
    assert figures[EFFICIENCY_VIEW] == pytest.approx(7 / 6)


def test_each_figure_is_taken_within_a_round_then_the_median() -> None:
    # A host twice as slow in round 2 scales every arm: the per-round figures agree, and so does their median.
    figures = communication_figures(
        _rounds(
            raw=[20, 40, 21],
            raw_no_sync=[10, 20, 10],
            raw_no_comm=[11, 22, 11],
            raw_blocking=[22, 44, 22],
            raw_bucket_view=[19, 38, 19],
            allreduce=[5, 10, 5],
        )
    )
    assert figures[EFFICIENCY] == pytest.approx(2.0)  # rounds: 2.0, 2.0, 2.2
    assert figures[BOOKKEEPING] == pytest.approx(1.0)  # ms, rounds: 1, 2, 1
    assert figures[HIDDEN] == pytest.approx(0.4)  # rounds: 0.4, 0.4, 0.2 (from the medians of the arms: 0.2)


def test_every_raw_part_is_a_figure_input() -> None:
    # A raw arm added without a figure (or the reverse) would break the JSON of the suite or the computation.
    times = _rounds(raw=[1.0], **{part: [1.0] for part in bench_ddp.RAW_PARTS})
    assert set(communication_figures(times)) == {EFFICIENCY, BOOKKEEPING, BUCKETED, HIDDEN, EFFICIENCY_VIEW}
    with pytest.raises(KeyError):
        communication_figures({k: v for k, v in times.items() if k != "raw_blocking"})


def test_lightnings_extra_time_splits_into_the_body_and_what_is_around_it() -> None:
    # Lightning 25 ms a step with a 22.2 ms body; raw 23.5 ms with a 22 ms body: 0.2 ms in the body, 1.3 ms around it.
    figures = overhead_figures(
        _rounds(ddp=[25, 50, 25], ddp_body=[22.2, 44.4, 22.2], raw=[23.5, 47, 23.5], raw_body=[22, 44, 22])
    )
    assert figures[IN_BODY] == pytest.approx(0.2) and figures[AROUND_BODY] == pytest.approx(
        1.3
    )  # rounds: 0.2, 0.4, 0.2; 1.3, 2.6, 1.3
