"""What the upgrade tests check a conversion with: :func:`upgraded` (the tool's output, checked to compile and to stay
the same under a second run) and the independent scan for 1.x spellings left unmarked, which lives in the library
(:mod:`lightning_mgpu.upgrade.leftovers`, which ``benchmarks/bench_upgrade_real.py`` also measures with).

Import it after ``pytest.importorskip("libcst", ...)``: the tool needs the ``[upgrade]`` extra.

Example::

    out = upgraded(SCRIPT)  # compiles, and a second run changes nothing
    out = upgraded(SCRIPT, no_todo=True, no_unmarked=True)  # and needs no human edit
"""

from __future__ import annotations

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.findings import FileResult
from lightning_mgpu.upgrade.leftovers import leftovers, unmarked
from lightning_mgpu.upgrade.transform import upgrade_source

__all__ = ["leftovers", "unmarked", "upgraded", "upgraded_result"]


def upgraded_result(source: str, *, no_todo: bool = False, no_unmarked: bool = False) -> FileResult:
    """``upgrade_source(source)``, checked: its output compiles, and the tool run again on that output returns it
    unchanged and reports no change (idempotent).

    Args:
        source: the 1.x source to convert.
        no_todo: also check that the output has no TODO (rules.TODO_TAG).
        no_unmarked: also check that the output has no 1.x spelling that no TODO marks (:func:`unmarked`).
    """
    result = upgrade_source(source)
    compile(result.source, "<upgraded>", "exec")
    again = upgrade_source(result.source)
    assert again.source == result.source and not again.changes, "a second run changed something"
    if no_todo:
        assert rules.TODO_TAG not in result.source, result.source
    if no_unmarked:
        assert unmarked(result.source) == [], result.source
    return result


def upgraded(source: str, *, no_todo: bool = False, no_unmarked: bool = False) -> str:
    """The source :func:`upgraded_result` returns (checked the same way)."""
    return upgraded_result(source, no_todo=no_todo, no_unmarked=no_unmarked).source
