"""Command line: ``python -m lightning_mgpu info | dashboard | upgrade | convert | build-horovod`` (also ``lightning-mgpu ...``).

``info`` says what is installed, what is registered and what to run; ``dashboard`` renders or serves a run;
``upgrade`` rewrites Lightning 1.x scripts for 2.x and this bundle; ``convert`` turns a sharded checkpoint folder into
one file (or .safetensors) and back; ``build-horovod`` builds the patched horovod.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
from dataclasses import dataclass

from lightning_mgpu.utilities.capabilities import capability
from lightning_mgpu.utilities.imports import is_available, package_version

_PACKAGES = ("torch", "lightning", "fairscale", "horovod", "ray", "neptune", "pynvml")


@dataclass(frozen=True)
class DeviceInfo:
    cpu_count: int
    cuda_visible_devices: str | None
    gpus: tuple[str, ...]


def horovod_build() -> str:
    """Which controllers/ops the installed horovod was built with, or why it is unusable."""
    if not is_available("horovod"):
        return "not installed (python -m lightning_mgpu build-horovod)"
    from lightning_mgpu.strategies.horovod.runtime import build_info

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


def _readiness(dependency: str | None, install_hint: str | None) -> str:
    if dependency is None or is_available(dependency):
        return "ready"
    return f"needs {dependency}" + (f" ({install_hint})" if install_hint else "")


def render() -> str:
    from lightning.pytorch.strategies import StrategyRegistry

    import lightning_mgpu  # noqa: F401  (registers the names)
    from lightning_mgpu.strategies.registry import (
        BUNDLE_STRATEGY_NAMES,
        strategy_dependency,
    )

    lines = [
        f"lightning_mgpu {lightning_mgpu.__version__}  (python {platform.python_version()}, {sys.platform})",
        "",
        "Packages:",
    ]
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
        if entry is None:
            lines.append(f"  {name:<18} NOT REGISTERED")
            continue
        ready = _readiness(strategy_dependency(name), capability(name, "install_hint"))
        cls = entry["strategy"]
        owner = "lightning" if cls.__module__.startswith("lightning.") else "lightning_mgpu"
        lines.append(f"  {name:<18} {cls.__name__:<22} [{owner}] {ready}  - {entry['description'] or ''}".rstrip())

    dev = devices()
    lines += ["", "Devices:", f"  CPU cores: {dev.cpu_count}"]
    lines.append(
        f"  CUDA_VISIBLE_DEVICES: {dev.cuda_visible_devices if dev.cuda_visible_devices is not None else '(unset)'}"
    )
    lines += [f"  {g}" for g in dev.gpus] or ["  GPUs: none (CPU runs use the gloo backend)"]

    lines += ["", "Launch commands on this machine:"]
    lines += [f"  {name:<14} {cmd}" for name, cmd in launch_commands(dev).items()]
    return "\n".join(lines)


def info_main() -> int:
    sys.stdout.write(render() + "\n")
    return 0


def build_horovod_main(args: argparse.Namespace) -> int:
    from lightning_mgpu.tools.build_horovod import (
        BuildConfig,
        HorovodBuildError,
        build_horovod,
    )

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        build_horovod(BuildConfig(python=args.python or sys.executable, force=args.force))
    except HorovodBuildError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lightning_mgpu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, registered strategies, devices and launch commands")
    dash = sub.add_parser("dashboard", help="render a self-contained HTML dashboard of a run, or serve it live")
    dash.add_argument("run", help="a CSV-logger folder, a TensorBoard log folder or a Neptune offline run folder")
    dash.add_argument(
        "--out",
        default=None,
        help="output folder (default: RUN/dashboard; for a Neptune run, <data dir>/dashboards/<run>)",
    )
    dash.add_argument(
        "--no-png", action="store_true", help="write only the HTML page, not the charts as PNG (no matplotlib needed)"
    )
    dash.add_argument(
        "--serve", action="store_true", help="serve the page on 127.0.0.1 and refresh it while training writes"
    )
    dash.add_argument("--port", type=int, default=8050, help="port for --serve (default 8050; 0 picks a free one)")
    dash.add_argument("--interval", type=float, default=3.0, help="seconds between re-reads of the run under --serve")
    upgrade = sub.add_parser(
        "upgrade",
        help="rewrite Lightning 1.x multi-GPU scripts for Lightning 2.x and lightning_mgpu (a diff; --write applies)",
    )
    from lightning_mgpu.upgrade.run import add_arguments

    add_arguments(upgrade)
    convert = sub.add_parser(
        "convert", help="a sharded checkpoint folder <-> one .ckpt file, or -> .safetensors (the weights)"
    )
    from lightning_mgpu.tools.convert_checkpoint import add_arguments as add_convert_arguments

    add_convert_arguments(convert)
    hvd = sub.add_parser("build-horovod", help="build horovod 0.28.1 against this torch (C++17 patch, Gloo; cached)")
    hvd.add_argument(
        "--python", default=None, help="the interpreter whose environment gets horovod (default: this one)"
    )
    hvd.add_argument("--force", action="store_true", help="rebuild even if horovod with Gloo is already importable")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "info":
        return info_main()
    if args.command == "build-horovod":
        return build_horovod_main(args)
    if args.command == "convert":
        from lightning_mgpu.tools.convert_checkpoint import main as convert_main

        return convert_main(args)
    if args.command == "upgrade":
        from lightning_mgpu.upgrade.run import main as upgrade_main

        return upgrade_main(args)
    if args.serve:
        from lightning_mgpu.dashboard.serve import main as serve_main

        return serve_main(args)
    from lightning_mgpu.dashboard.render import main as dashboard_main

    return dashboard_main(args)
