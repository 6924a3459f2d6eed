"""``python -m lightning_mgpu build-horovod``: the patch, the cache key and the fast path.

The full build (minutes) runs on every fresh CI machine through ``scripts/build_horovod.sh``, which calls
this same command; these tests check its parts in seconds.

The in-process tests; the ones that launch processes are in ``tests/integration/strategies/horovod/test_build.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_mgpu.tools import build_horovod as build


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


# The part of horovod 0.28.1's safe_shell_exec.py the exit-status patch touches, as released.
_SAFE_SHELL_EXEC = (
    """import subprocess
import sys
import threading
import time

import psutil

GRACEFUL_TERMINATION_TIME_S = 5


def terminate_executor_shell_and_children(pid):
    p = psutil.Process(pid)
    # Kill shell itself.
    try:
        p.terminate()
    except psutil.NoSuchProcess:
        pass

"""
    + build._REAPING_WAIT
)


def test_exit_status_patch_stops_reaping_the_shell_and_marks_the_file(tmp_path: Path) -> None:
    path = tmp_path / build._SAFE_SHELL_EXEC
    path.parent.mkdir(parents=True)
    path.write_text(_SAFE_SHELL_EXEC)
    build.patch_exit_status(tmp_path)
    patched = path.read_text()
    assert (
        "p.wait(" not in patched and "p.status() == psutil.STATUS_ZOMBIE" in patched and build.PATCH_MARKER in patched
    )
    compile(patched, str(path), "exec")
    build.patch_exit_status(tmp_path)  # idempotent
    assert path.read_text() == patched
    path.write_text("import time\nimport psutil\n")
    with pytest.raises(build.HorovodBuildError, match="terminate_executor_shell_and_children"):
        build.patch_exit_status(tmp_path)


def test_the_set_up_script_asks_for_the_same_patch_level() -> None:
    script = (Path(__file__).resolve().parents[3] / "scripts" / "build_horovod.sh").read_text()
    assert f"\nPATCH_LEVEL={build.PATCH_LEVEL}\n" in script


def _nccl_wheel(root: Path) -> Path:
    """The layout of the nvidia-nccl-cu<N> wheel: include/nccl.h and lib/libnccl.so.2 (no libnccl.so link)."""
    (root / "include").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    (root / "lib" / "libnccl.so.2").write_bytes(b"\x7fELF")
    return root


def test_a_gpu_build_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("")
    wheel = _nccl_wheel(tmp_path / "nvidia" / "nccl")
    with pytest.raises(build.HorovodBuildRefused, match=r"needs a CUDA build of torch; .* torch 2.13.0 is the CPU"):
        build.resolve_gpu_toolchain(None, str(nvcc), [wheel], "2.13.0")
    with pytest.raises(build.HorovodBuildRefused, match=r"needs nvcc, the CUDA compiler: .*CUDA 13.0"):
        build.resolve_gpu_toolchain("13.0", None, [wheel])
    with pytest.raises(build.HorovodBuildRefused, match=r"needs NCCL .*pip install nvidia-nccl-cu13"):
        build.resolve_gpu_toolchain("13.0", str(nvcc), [tmp_path / "nowhere"])
    found = build.resolve_gpu_toolchain("13.0", str(nvcc), [tmp_path / "nowhere", wheel])
    assert found == build.GpuToolchain(cuda_home=(tmp_path / "cuda").resolve(), cuda_version="13.0", nccl_home=wheel)


def test_a_gpu_build_compiles_for_torchs_architectures_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """horovod's default is every architecture nvcc knows (CUDA 13: a dozen, twice each); torch's own list is the set
    the wheel can run on anyway. HOROVOD_BUILD_CUDA_CC_LIST set by the user wins."""
    wheel = _nccl_wheel(tmp_path / "nccl")
    found = build.resolve_gpu_toolchain(
        "13.0",
        "/usr/bin/nvcc",
        [wheel],
        torch_archs="sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120",
        cuda_home=Path("/usr/local/cuda-13.0"),
    )
    assert found.cuda_archs == (75, 80, 86, 90, 100, 120)
    assert found.cuda_home == Path("/usr/local/cuda-13.0")  # nvcc on the PATH is often a wrapper elsewhere
    monkeypatch.delenv("HOROVOD_BUILD_CUDA_CC_LIST", raising=False)
    assert build.gpu_build_env(found, tmp_path)["HOROVOD_BUILD_CUDA_CC_LIST"] == "75,80,86,90,100,120"
    monkeypatch.setenv("HOROVOD_BUILD_CUDA_CC_LIST", "90")
    assert build.gpu_build_env(found, tmp_path)["HOROVOD_BUILD_CUDA_CC_LIST"] == "90"
    monkeypatch.delenv("HOROVOD_BUILD_CUDA_CC_LIST")
    unknown = build.resolve_gpu_toolchain("13.0", "/usr/bin/nvcc", [wheel])  # torch listed none: horovod's default
    assert "HOROVOD_BUILD_CUDA_CC_LIST" not in build.gpu_build_env(unknown, tmp_path)


def test_a_gpu_build_links_nccl_as_cmake_expects_and_sets_its_environment(tmp_path: Path) -> None:
    toolchain = build.GpuToolchain(Path("/opt/cuda"), "13.0", _nccl_wheel(tmp_path / "wheel"))
    linked = build.nccl_link_dir(toolchain, tmp_path / "work")
    assert (linked / "include" / "nccl.h").read_text().startswith("#define NCCL_MAJOR")
    assert (linked / "lib" / "libnccl.so").resolve() == (tmp_path / "wheel" / "lib" / "libnccl.so.2").resolve()
    env = build.gpu_build_env(toolchain, linked)
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL" and env["HOROVOD_NCCL_HOME"] == str(linked)
    assert env["HOROVOD_CUDA_HOME"] == "/opt/cuda" and env["PATH"].startswith("/opt/cuda/bin")
    assert env["HOROVOD_NCCL_LINK"] == "SHARED"


def test_the_cache_key_names_the_cuda_of_a_gpu_build() -> None:
    cpu = build.key_for("2.13.0", "cp311")
    gpu = build.key_for("2.11.0_cu130", "cp312", build.GpuToolchain(Path("/c"), "13.0", Path("/n")))
    assert cpu == f"hvd0.28.1-p{build.PATCH_LEVEL}-torch2.13.0-cp311"
    assert gpu == f"hvd0.28.1-p{build.PATCH_LEVEL}-torch2.11.0_cu130-cp312-nccl-cuda13.0"
