from __future__ import annotations

import pytest

from lightning_mgpu.utilities.imports import (
    MissingDependencyError,
    is_available,
    require,
)


def test_require_names_the_extra() -> None:
    with pytest.raises(MissingDependencyError, match=r"strategy='x' needs `surely_not_a_pkg_1234`"):
        require("surely_not_a_pkg_1234", "strategy='x'")


def test_require_imports_present_package() -> None:
    assert require("json", "test").dumps([1]) == "[1]"
    assert is_available("json") and not is_available("surely_not_a_pkg_1234")


@pytest.mark.parametrize(
    ("package", "extra"),
    [("neptune", "neptune"), ("psutil", "monitor"), ("plotly", "dashboard"), ("horovod", "horovod")],
)
def test_each_optional_package_names_its_extra(monkeypatch: pytest.MonkeyPatch, package: str, extra: str) -> None:
    import importlib

    def missing(name: str, *args: object) -> object:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(MissingDependencyError, match=rf"Install the `{extra}` extra"):
        require(package, "feature")
