"""benchmarks/upgrade_equivalence.py's comparison (issue 54)."""

from __future__ import annotations

import math

from benchmarks.upgrade_equivalence import CASES, Case, compare, digest, verdict


def test_a_nan_beside_a_number_differs_and_two_nans_are_equal() -> None:
    """A converted run whose weights went NaN (terminate_on_nan.py's, trained past the NaN loss 1.x stopped at) was
    reported equal: NaN compares false with every bound."""
    assert compare({"w": digest([1.0, 2.0])}, {"w": digest([1.0, math.nan])}) == {
        "w": "differs from value 1 on (largest relative difference inf)"
    }
    assert compare({"w": [math.nan, 1.0]}, {"w": [math.nan, 1.0]}) == {"w": "equal"}
    assert compare({"w": [0.0, 1.0]}, {"w": [0.0, 1.0 + 1e-9]}) == {"w": "equal"}


def test_a_named_difference_explains_only_its_figures() -> None:
    case = Case("1.6", "single device", difference="x", explains=("steps_run",))
    assert verdict(case, {"losses": "equal", "steps_run": "differs"}) == "named difference"
    assert verdict(case, {"losses": "differs", "steps_run": "differs"}) == "DIFFERS"


def test_every_case_names_a_known_era_and_difference() -> None:
    from benchmarks.upgrade_equivalence import DIFFERENCES

    for case in CASES.values():
        assert case.era in ("1.9", "1.6")
        for name in filter(None, (d.strip() for d in case.difference.split(","))):
            assert name in DIFFERENCES
