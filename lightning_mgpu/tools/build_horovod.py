"""Build horovod 0.28.1 against the installed torch, patched for C++17, and install it (cached).

Why a build of our own: horovod's last release asks CMake for C++14, but torch >= 2.1 headers need C++17,
so the PyPI sdist does not build as released. This downloads the sdist, patches its two CMake files, builds
a wheel with Gloo (no MPI, TensorFlow or MXNet) and caches it keyed by horovod, torch and Python versions,
so only the first run on a machine pays the build (2-10 minutes on 2 cores).

Run it as ``lightning-mgpu build-horovod``; the repository's set-up script is a thin wrapper around it.
``lightning-mgpu build-horovod --gpu`` builds the GPU operations on NCCL against a CUDA torch (nvcc, and NCCL from the
``nvidia-nccl-cu<N>`` wheel or the system), cached under a key that names the CUDA version.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

HOROVOD_VERSION = "0.28.1"
#: Bumped whenever the patches change, so that a cached or installed wheel without them is rebuilt.
PATCH_LEVEL = 2
_CMAKE_FILES = ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
_SAFE_SHELL_EXEC = "horovod/runner/common/util/safe_shell_exec.py"
#: The marker the patched safe_shell_exec carries (installed_with_gloo asks for it).
PATCH_MARKER = f"LIGHTNING_MGPU_PATCH_LEVEL = {PATCH_LEVEL}"
_REAPING_WAIT = """    try:
        p.wait(timeout=GRACEFUL_TERMINATION_TIME_S)
    except psutil.TimeoutExpired:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
"""
# The middleman's main thread waits for its shell with subprocess; psutil's wait() here reaped the shell first, and
# subprocess then read ECHILD as exit status 0: horovodrun reported success for a job stopped by Ctrl-C.
_POLLING_WAIT = """\
    # lightning_mgpu: wait without reaping. The shell is this middleman's own child and the main thread waits for it
    # with subprocess; psutil's wait() would reap it first, and subprocess then reads ECHILD as exit status 0.
    deadline = time.monotonic() + GRACEFUL_TERMINATION_TIME_S
    while time.monotonic() < deadline:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    try:
        p.kill()
    except psutil.NoSuchProcess:
        pass
"""
_BUILD_ENV = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
}


class HorovodBuildError(RuntimeError):
    """The build could not run or failed; the message names the missing tool or the failed step."""


class HorovodBuildRefused(HorovodBuildError):
    """What was asked cannot be built here (a GPU build without CUDA torch, nvcc or NCCL): refused before any work."""


@dataclass(frozen=True)
class GpuToolchain:
    """What a GPU build of horovod compiles against: the CUDA toolkit (nvcc) and NCCL."""

    cuda_home: Path
    cuda_version: str  # torch's CUDA (``torch.version.cuda``), which the wheel is tied to
    nccl_home: Path  # holds include/nccl.h and lib/libnccl.so*
    # The GPU architectures horovod's kernels are compiled for (``HOROVOD_BUILD_CUDA_CC_LIST``): torch's own, so the
    # wheel runs wherever that torch does. Empty: horovod's default, every architecture nvcc knows (slower to build).
    cuda_archs: tuple[int, ...] = ()


@dataclass(frozen=True)
class BuildConfig:
    """Where the wheel is cached and what it is built for.

    Args:
        python: the interpreter whose environment gets horovod (default: this one).
        cache_dir: the wheel cache root (default ``$HOROVOD_CACHE_DIR`` or ``~/.cache/lightning_mgpu/horovod``).
        force: rebuild even if a suitable horovod is already importable.
        gpu: build the GPU operations on NCCL (``HOROVOD_GPU_OPERATIONS=NCCL``) against the environment's CUDA
            torch; needs nvcc, and NCCL from the ``nvidia-nccl-cu<N>`` wheel in that environment or the system.
        nvcc: the CUDA compiler (default: ``nvcc`` on the PATH, else ``$CUDA_HOME/bin/nvcc``).
        nccl_home: a folder with ``include/nccl.h`` and ``lib/libnccl.so*`` (default: the wheel's, else the system's).
    """

    python: str = sys.executable
    cache_dir: Path | None = None
    force: bool = False
    gpu: bool = False
    nvcc: str | None = None
    nccl_home: Path | None = None

    def cache_root(self) -> Path:
        if self.cache_dir is not None:
            return Path(self.cache_dir)
        env = os.environ.get("HOROVOD_CACHE_DIR")
        if env:
            return Path(env)
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "lightning_mgpu" / "horovod"


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None, quiet: bool = True) -> str:
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=quiet, text=True)
    if proc.returncode != 0:
        tail = ((proc.stdout or "") + (proc.stderr or ""))[-4000:]
        raise HorovodBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout or ""


def _probe(python: str, code: str) -> str | None:
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def installed_with_nccl(python: str) -> bool:
    """Whether ``python`` imports a patched ``horovod.torch`` whose GPU operations run on NCCL."""
    probe = (
        "import horovod.torch as h, sys; from horovod.runner.common.util import safe_shell_exec as s;"
        f" sys.exit(0 if h.nccl_built() and getattr(s, 'LIGHTNING_MGPU_PATCH_LEVEL', 0) >= {PATCH_LEVEL} else 1)"
    )
    return _probe(python, probe) is not None


#: Where a system NCCL usually is (Debian/Ubuntu's libnccl-dev, NVIDIA's containers).
_SYSTEM_NCCL = (Path("/usr"), Path("/usr/local/nccl"), Path("/usr/local/cuda"))


def _has_nccl(home: Path) -> bool:
    libs = [home / "lib", home / "lib64", home / "lib" / "x86_64-linux-gnu"]
    return (home / "include" / "nccl.h").is_file() and any(any(d.glob("libnccl.so*")) for d in libs if d.is_dir())


def resolve_gpu_toolchain(
    torch_cuda: str | None,
    nvcc: str | None,
    nccl_candidates: list[Path],
    torch_version: str = "?",
    torch_archs: str = "",
    cuda_home: Path | None = None,
) -> GpuToolchain:
    """Decide what a GPU build compiles against, or say in one message what is missing and how to get it.

    Args:
        torch_cuda: the environment's ``torch.version.cuda`` (None: a CPU build of torch).
        nvcc: the CUDA compiler found, if any.
        nccl_candidates: folders that may hold NCCL, best first (the nvidia-nccl wheel's, then the system's).
        torch_version: for the message.
        torch_archs: the architectures torch was compiled for, as torch lists them (``"sm_80 sm_90 ..."``).
        cuda_home: the toolkit nvcc belongs to (:func:`cuda_toolkit_home`); default: the folder above nvcc's.

    Raises:
        HorovodBuildRefused: a CPU torch, no nvcc, or no NCCL.
    """
    if not torch_cuda:
        raise HorovodBuildRefused(
            f"build-horovod --gpu needs a CUDA build of torch; this environment's torch {torch_version} is the CPU"
            " build (install torch from the CUDA index, or build without --gpu for Gloo on CPUs)."
        )
    if not nvcc:
        raise HorovodBuildRefused(
            "build-horovod --gpu needs nvcc, the CUDA compiler: install the CUDA toolkit matching torch's CUDA"
            f" {torch_cuda}, and put nvcc on the PATH or set CUDA_HOME (or pass --nvcc PATH)."
        )
    major = torch_cuda.split(".")[0]
    nccl = next((home for home in nccl_candidates if _has_nccl(home)), None)
    if nccl is None:
        raise HorovodBuildRefused(
            f"build-horovod --gpu needs NCCL (include/nccl.h and libnccl.so): pip install nvidia-nccl-cu{major} into"
            " this environment, install the system's libnccl-dev, or pass --nccl-home DIR."
        )
    archs = tuple(sorted({int(a.split("_")[1]) for a in torch_archs.split() if a.startswith("sm_")}))
    home = cuda_home or Path(nvcc).resolve().parent.parent
    return GpuToolchain(cuda_home=home, cuda_version=torch_cuda, nccl_home=nccl, cuda_archs=archs)


def cuda_toolkit_home(nvcc: str) -> Path:
    """The CUDA toolkit that ``nvcc`` belongs to: ``$CUDA_HOME``, else the folder nvcc itself reports.

    ``nvcc`` on the PATH is often a wrapper script or a link (``/usr/local/bin/nvcc`` running
    ``/usr/local/cuda-13.0/bin/nvcc``), whose own folder holds no headers or libraries; nvcc's dry run names its real
    ``bin`` folder (``_HERE_``).
    """
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env and (Path(env) / "include" / "cuda_runtime.h").is_file():
        return Path(env)
    proc = subprocess.run(
        [nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull], capture_output=True, text=True
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.startswith("#$ _HERE_="):
            return Path(line.split("=", 1)[1]).resolve().parent
    return Path(nvcc).resolve().parent.parent


def gpu_toolchain(config: BuildConfig) -> GpuToolchain:
    """:func:`resolve_gpu_toolchain` with what ``config.python``'s environment and this machine hold."""
    torch_cuda = _probe(config.python, "import torch; print(torch.version.cuda or '')")
    torch_version = _probe(config.python, "import torch; print(torch.__version__)") or "?"
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = config.nvcc or shutil.which("nvcc") or (str(Path(cuda_home) / "bin" / "nvcc") if cuda_home else None)
    if nvcc and not Path(nvcc).is_file():
        nvcc = None
    wheel_nccl = _probe(config.python, "import nvidia.nccl as n; print(list(n.__path__)[0])")
    candidates = [*([config.nccl_home] if config.nccl_home else []), *([Path(wheel_nccl)] if wheel_nccl else [])]
    # torch.cuda.get_arch_list() is empty without a visible GPU, and a build machine often has none; the flags torch
    # was compiled with are known either way.
    archs = _probe(config.python, "import torch; print(torch._C._cuda_getArchFlags())") or ""
    home = cuda_toolkit_home(nvcc) if nvcc else None
    return resolve_gpu_toolchain(torch_cuda, nvcc, [*candidates, *_SYSTEM_NCCL], torch_version, archs, home)


def gpu_build_env(toolchain: GpuToolchain, nccl_link_dir: Path) -> dict[str, str]:
    """The environment of a GPU build: NCCL for the GPU operations, linked dynamically (as torch links it), kernels for
    torch's architectures unless ``HOROVOD_BUILD_CUDA_CC_LIST`` is already set."""
    archs = os.environ.get("HOROVOD_BUILD_CUDA_CC_LIST") or ",".join(map(str, toolchain.cuda_archs))
    return {
        **({"HOROVOD_BUILD_CUDA_CC_LIST": archs} if archs else {}),
        "HOROVOD_GPU_OPERATIONS": "NCCL",
        "HOROVOD_CUDA_HOME": str(toolchain.cuda_home),
        "HOROVOD_NCCL_HOME": str(nccl_link_dir),
        "HOROVOD_NCCL_LINK": "SHARED",
        "PATH": f"{toolchain.cuda_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def nccl_link_dir(toolchain: GpuToolchain, work: Path) -> Path:
    """A folder laid out as horovod's FindNCCL expects: ``include/nccl.h`` and ``lib/libnccl.so``.

    The nvidia-nccl wheel ships ``lib/libnccl.so.2`` alone, without the ``libnccl.so`` link that CMake looks for;
    this links both into ``work`` (remove when horovod's FindNCCL also matches ``libnccl.so.2``: not in 0.28.1).
    """
    out = work / "nccl"
    (out / "lib").mkdir(parents=True, exist_ok=True)
    (out / "include").mkdir(exist_ok=True)
    (out / "include" / "nccl.h").symlink_to(toolchain.nccl_home / "include" / "nccl.h")
    libs = [d for d in (toolchain.nccl_home / "lib", toolchain.nccl_home / "lib64") if d.is_dir()]
    real = next(p for d in libs for p in sorted(d.glob("libnccl.so*")) if "static" not in p.name)
    for name in ("libnccl.so", real.name):
        if not (out / "lib" / name).exists():
            (out / "lib" / name).symlink_to(real)
    return out


def installed_with_gloo(python: str) -> bool:
    """Whether ``python`` imports ``horovod.torch`` built with Gloo and carrying this version's patches (usable
    here)."""
    probe = (
        "import horovod.torch as h, sys; from horovod.runner.common.util import safe_shell_exec as s;"
        f" sys.exit(0 if h.gloo_built() and getattr(s, 'LIGHTNING_MGPU_PATCH_LEVEL', 0) >= {PATCH_LEVEL} else 1)"
    )
    return _probe(python, probe) is not None


def cache_key(python: str, gpu: GpuToolchain | None = None) -> str:
    """``hvd<version>-p<patch level>-torch<version>-cp<XY>[-nccl-cuda<V>]``: a wheel is tied to the torch it was built
    against, to the patches it carries, and (GPU builds) to the CUDA it was compiled for."""
    torch_version = _probe(python, "import torch; print(torch.__version__.replace('+', '_'))")
    if torch_version is None:
        raise HorovodBuildError(f"{python} cannot import torch; install torch first (horovod builds against it).")
    tag = _probe(python, "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
    return key_for(torch_version, str(tag), gpu)


def key_for(torch_version: str, python_tag: str, gpu: GpuToolchain | None = None) -> str:
    """The cache key of a build (see :func:`cache_key`)."""
    suffix = f"-nccl-cuda{gpu.cuda_version}" if gpu is not None else ""
    return f"hvd{HOROVOD_VERSION}-p{PATCH_LEVEL}-torch{torch_version}-{python_tag}{suffix}"


def patch_cxx17(source: Path) -> None:
    """Ask CMake for C++17 instead of C++14 in horovod's two CMake files (torch >= 2.1's headers need C++17).

    Remove when a horovod release asks for C++17 itself: 0.28.1 (2023) is the last one.

    Raises:
        HorovodBuildError: a file is missing or no longer holds the line to patch (another horovod version).
    """
    for rel in _CMAKE_FILES:
        path = source / rel
        text = path.read_text() if path.is_file() else ""
        if "set(CMAKE_CXX_STANDARD 14)" not in text and "set(CMAKE_CXX_STANDARD 17)" not in text:
            raise HorovodBuildError(f"could not patch {path} for C++17: the CMAKE_CXX_STANDARD line is not there")
        path.write_text(text.replace("set(CMAKE_CXX_STANDARD 14)", "set(CMAKE_CXX_STANDARD 17)"))


def patch_exit_status(source: Path) -> None:
    """Make horovodrun report a worker's real exit status after it terminates the workers (Ctrl-C, a failed rank).

    Remove when horovod's ``safe_shell_exec`` polls for the shell's exit status itself (not in 0.28.1, the last
    release).

    Raises:
        HorovodBuildError: the file no longer holds the code to patch (another horovod version).
    """
    path = source / _SAFE_SHELL_EXEC
    text = path.read_text() if path.is_file() else ""
    if PATCH_MARKER in text:
        return
    if _REAPING_WAIT not in text or "\nimport time\n" not in text:
        raise HorovodBuildError(
            f"could not patch {path}: the shell's wait in terminate_executor_shell_and_children is not there"
        )
    text = text.replace(_REAPING_WAIT, _POLLING_WAIT).replace(
        "\nimport psutil\n", f"\nimport psutil\n\n{PATCH_MARKER}\n", 1
    )
    path.write_text(text)


def _build_wheel(config: BuildConfig, cache: Path, gpu: GpuToolchain | None = None) -> Path:
    if shutil.which("g++") is None:
        raise HorovodBuildError("g++ is needed to build horovod: install it (Debian/Ubuntu: apt-get install g++).")
    if shutil.which("cmake") is None:
        _run([config.python, "-m", "pip", "install", "-q", "cmake<4"], "installing cmake")
    with tempfile.TemporaryDirectory(prefix="horovod-build-") as work:
        src = Path(work) / "src"
        _run(
            [
                config.python,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"horovod=={HOROVOD_VERSION}",
                "-d",
                str(src),
            ],
            "downloading the horovod sdist",
        )
        with tarfile.open(src / f"horovod-{HOROVOD_VERSION}.tar.gz") as archive:
            archive.extractall(src, filter="data")
        tree = src / f"horovod-{HOROVOD_VERSION}"
        patch_cxx17(tree)
        patch_exit_status(tree)
        log.warning("building horovod %s for %s (2-10 minutes on 2 cores)...", HOROVOD_VERSION, cache.name)
        out = Path(work) / "wheel"
        env = {**_BUILD_ENV, "MAKEFLAGS": f"-j{os.cpu_count() or 1}"}
        if gpu is not None:
            env.update(gpu_build_env(gpu, nccl_link_dir(gpu, Path(work))))
        # The build imports torch, so it must see the target environment's torch: no build isolation.
        _run(
            [config.python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(tree), "-w", str(out)],
            "building the horovod wheel",
            env=env,
        )
        built = next(out.glob("horovod-*.whl"))
        # Copy, then rename: an interrupted build never leaves a half-written wheel in the cache.
        partial = cache / ".partial.whl"
        shutil.copyfile(built, partial)
        final = cache / built.name
        os.replace(partial, final)
        return final


def build_horovod(config: BuildConfig | None = None) -> Path | None:
    """Build (or take from the cache) and install horovod into ``config.python``'s environment.

    Returns:
        The wheel installed, or ``None`` when a Gloo-enabled horovod was already importable.

    Raises:
        HorovodBuildError: torch, g++ or the network (PyPI) is missing, or a build step failed.

    Example::

        python -m lightning_mgpu build-horovod
    """
    config = config or BuildConfig()
    # Everything a GPU build needs is checked before anything is downloaded or compiled.
    gpu = gpu_toolchain(config) if config.gpu else None
    ready = installed_with_nccl if config.gpu else installed_with_gloo
    if not config.force and ready(config.python):
        log.warning("horovod is already installed with %s", "NCCL" if config.gpu else "Gloo")
        return None
    cache = config.cache_root() / cache_key(config.python, gpu)
    cache.mkdir(parents=True, exist_ok=True)
    wheel = next(iter(sorted(cache.glob("horovod-*.whl"))), None) or _build_wheel(config, cache, gpu)
    # --force-reinstall: after a torch upgrade the environment still holds horovod built against the old torch,
    # and pip skips a wheel of an installed version; --no-deps keeps pip away from torch.
    _run(
        [config.python, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(wheel)],
        "installing the wheel",
    )
    # horovod's runtime needs (cloudpickle, psutil, pyyaml, packaging) come from PyPI as usual.
    _run([config.python, "-m", "pip", "install", "-q", str(wheel)], "installing horovod's dependencies")
    if not ready(config.python):
        raise HorovodBuildError(
            f"horovod from {wheel} was installed but does not import with {'NCCL' if config.gpu else 'Gloo'};"
            f" remove {cache} and rebuild."
        )
    log.warning("horovod %s installed from %s (%s)", HOROVOD_VERSION, wheel, "gloo, nccl" if config.gpu else "gloo")
    return wheel
