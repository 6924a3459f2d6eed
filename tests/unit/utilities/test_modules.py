"""``select_modules``: submodules by class, qualified-name pattern or predicate, with errors that name the fix."""

from __future__ import annotations

import pytest
from torch import nn

from lightning_mgpu.utilities.modules import select_modules


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.LayerNorm(4))


def test_by_class_pattern_and_predicate() -> None:
    model = _model()
    assert [n for n, _ in select_modules(model, [nn.Linear], owner="X")] == ["0", "1.0"]
    assert [n for n, _ in select_modules(model, ["1.*"], owner="X")] == ["1.0", "1.1"]
    assert [n for n, _ in select_modules(model, [lambda name, m: name == "2"], owner="X")] == ["2"]
    assert [n for n, _ in select_modules(model, [nn.LayerNorm, "0"], owner="X")] == ["0", "2"]


def test_an_entry_that_matches_nothing_names_what_is_there() -> None:
    with pytest.raises(ValueError, match=r"X: no submodule of Sequential is an instance of Conv2d\. Present classes"):
        select_modules(_model(), [nn.Conv2d], owner="X")
    with pytest.raises(ValueError, match=r"X: pattern 'blocks\.\*' matched no submodule"):
        select_modules(_model(), ["blocks.*"], owner="X")
    with pytest.raises(TypeError, match="X: cannot select modules with 3"):
        select_modules(_model(), [3], owner="X")  # type: ignore[list-item]
