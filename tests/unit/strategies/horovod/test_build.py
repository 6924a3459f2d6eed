"""``python -m lightning_mgpu build-horovod``: the patch, the cache key and the fast path.

The full build (minutes) runs on every fresh CI machine through ``scripts/build_horovod.sh``, which calls
this same command; these tests check its parts in seconds.

The in-process tests; the ones that launch processes are in ``tests/integration/strategies/horovod/test_build.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_mgpu.strategies.horovod import build


def _tree(root: Path, standard: int = 14) -> Path:
    for rel in ("CMakeLists.txt", "horovod/torch/CMakeLists.txt"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"project(x)\nset(CMAKE_CXX_STANDARD {standard})\n")
    return root


def test_patch_asks_cmake_for_cxx17_in_both_files(tmp_path: Path) -> None:
    build.patch_cxx17(_tree(tmp_path))
    for rel in ("CMakeLists.txt", "horovod/torch/CMakeLists.txt"):
        assert "set(CMAKE_CXX_STANDARD 17)" in (tmp_path / rel).read_text()
        assert "CMAKE_CXX_STANDARD 14" not in (tmp_path / rel).read_text()
    build.patch_cxx17(tmp_path)  # idempotent


def test_patch_refuses_a_tree_it_does_not_recognise(tmp_path: Path) -> None:
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    with pytest.raises(build.HorovodBuildError, match="CMAKE_CXX_STANDARD"):
        build.patch_cxx17(tmp_path)


def test_cache_root_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOROVOD_CACHE_DIR", str(tmp_path))
    assert build.BuildConfig().cache_root() == tmp_path

