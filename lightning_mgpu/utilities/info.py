"""``python -m lightning_mgpu info``: what is installed, what is registered, what to run."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass

from lightning_mgpu.utilities.imports import is_available, package_version

_PACKAGES = ("torch", "lightning", "fairscale", "horovod", "ray", "neptune", "pynvml")
# strategy name -> the optional package it needs (None: torch alone)
_STRATEGY_DEPENDENCY = {
    "dp": None,
    "ddp": None,
    "ddp_spawn": None,
    "horovod": "horovod",
    "sharded": "fairscale",
    "sharded_spawn": "fairscale",
    "ddp_sharded": "fairscale",
    "ddp_sharded_spawn": "fairscale",
}


@dataclass(frozen=True)
class DeviceInfo:
    cpu_count: int
    cuda_visible_devices: str | None
    gpus: tuple[str, ...]


def horovod_build() -> str:
    """Which controllers/ops the installed horovod was built with, or why it is unusable."""
    if not is_available("horovod"):
        return "not installed (bash scripts/build_horovod.sh)"
    from lightning_mgpu.strategies._horovod_runtime import build_info

    built = build_info()
    if not built["importable"]:
        return f"installed but unusable: {built['error']}"  # names the rebuild command
    return ", ".join(f"{k}={'yes' if built[k] else 'no'}" for k in ("gloo", "mpi", "nccl", "cuda"))


def devices() -> DeviceInfo:
    import torch

    gpus: tuple[str, ...] = ()
    if torch.cuda.is_available():
        # torch already honours CUDA_VISIBLE_DEVICES: index i here is the i-th visible device.
        gpus = tuple(
            f"cuda:{i} {torch.cuda.get_device_name(i)} ({torch.cuda.get_device_properties(i).total_memory / 2**30:.1f} GiB)"
            for i in range(torch.cuda.device_count())
        )
    return DeviceInfo(os.cpu_count() or 1, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus)


def launch_commands(dev: DeviceInfo) -> dict[str, str]:
    """The command to run examples/train.py under each strategy on this machine."""
    n = len(dev.gpus) or 2
    acc = "gpu" if dev.gpus else "cpu"
    base = f"python examples/train.py --accelerator {acc}"
    cmds = {
        "ddp": f"{base} --strategy ddp --devices {n}",
        "ddp_spawn": f"{base} --strategy ddp_spawn --devices {n}",
        "dp": f"{base} --strategy dp --devices {n}" + ("" if dev.gpus else "   # single device on CPU"),
        "horovod": f"horovodrun -np {n}{'' if dev.gpus else ' --gloo'} {base} --strategy horovod"
        f"   # or without horovodrun: {base} --strategy horovod --devices {n}",
        "sharded": f"{base} --strategy sharded --devices {n}",
        "sharded_spawn": f"{base} --strategy sharded_spawn --devices {n}",
    }
    return cmds


def _readiness(dependency: str | None) -> str:
    if dependency is None or is_available(dependency):
        return "ready"
    if dependency == "horovod":
        return "needs horovod (bash scripts/build_horovod.sh)"
    return f"needs {dependency} (pip install 'lightning_mgpu[sharded]')"


def render() -> str:
    import lightning_mgpu  # noqa: F401  (registers the names)
    from lightning.pytorch.strategies import StrategyRegistry

    from lightning_mgpu.strategies.registry import BUNDLE_STRATEGY_NAMES

    lines = [f"lightning_mgpu {lightning_mgpu.__version__}  (python {platform.python_version()}, {sys.platform})", "", "Packages:"]
    for pkg in _PACKAGES:
        version = package_version(pkg)
        label = "nvidia-ml-py" if pkg == "pynvml" else pkg
        lines.append(f"  {label:<13} {version or 'not installed'}")
    lines.append(f"  {'horovod build':<13} {horovod_build()}")
    import torch

    lines.append(f"  {'torch cuda':<13} {torch.version.cuda or 'CPU build'}")

    lines += ["", "Strategies (Trainer(strategy=NAME)):"]
    for name in ("ddp", "ddp_spawn", *BUNDLE_STRATEGY_NAMES):
        entry = StrategyRegistry[name] if name in StrategyRegistry else None
        ready = _readiness(_STRATEGY_DEPENDENCY.get(name))
        if entry is None:
            lines.append(f"  {name:<18} NOT REGISTERED")
            continue
        cls = entry["strategy"]
        owner = "lightning" if cls.__module__.startswith("lightning.") else "lightning_mgpu"
        lines.append(f"  {name:<18} {cls.__name__:<22} [{owner}] {ready}  - {entry['description'] or ''}".rstrip())

    dev = devices()
    lines += ["", "Devices:", f"  CPU cores: {dev.cpu_count}"]
    lines.append(f"  CUDA_VISIBLE_DEVICES: {dev.cuda_visible_devices if dev.cuda_visible_devices is not None else '(unset)'}")
    lines += [f"  {g}" for g in dev.gpus] or ["  GPUs: none (CPU runs use the gloo backend)"]

    lines += ["", "Launch commands on this machine:"]
    lines += [f"  {name:<14} {cmd}" for name, cmd in launch_commands(dev).items()]
    return "\n".join(lines)


def main() -> int:
    sys.stdout.write(render() + "\n")
    return 0
