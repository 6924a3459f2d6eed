"""The ``lightning-mgpu`` command (also ``python -m lightning_mgpu``): info, dashboard, upgrade, convert, build-horovod.

``info`` says what is installed, what is registered and what to run; ``dashboard`` renders or serves a run;
``upgrade`` rewrites Lightning 1.x scripts for 2.x and this bundle; ``convert`` turns a sharded checkpoint folder into
one file (or .safetensors) and back; ``build-horovod`` builds the patched horovod.

Parsing imports neither torch nor Lightning (seconds of import): ``--help``, a bad argument and ``upgrade`` answer at
once, and each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from lightning_mgpu.utilities.imports import is_available, package_version

PROG = "lightning-mgpu"
#: (import name, distribution) of every package the extras name, in the order `info` lists them.
_PACKAGES = (
    ("torch", "torch"),
    ("lightning", "lightning"),
    ("pytorch_lightning", "pytorch-lightning"),
    ("fairscale", "fairscale"),
    ("horovod", "horovod"),
    ("ray", "ray"),
    ("neptune", "neptune"),
    ("pynvml", "nvidia-ml-py"),
    ("psutil", "psutil"),
    ("plotly", "plotly"),
    ("matplotlib", "matplotlib"),
    ("tensorboard", "tensorboard"),
    ("libcst", "libcst"),
    ("safetensors", "safetensors"),
)


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, ``PROG: error: ...``, exit 2, pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class DeviceInfo:
    cpu_count: int
    cuda_visible_devices: str | None
    gpus: tuple[str, ...]


def horovod_build() -> str:
    """Which controllers/ops the installed horovod was built with, or why it is unusable."""
    if not is_available("horovod"):
        return "not installed (lightning-mgpu build-horovod)"
    from lightning_mgpu.strategies.horovod.runtime import build_info

    built = build_info()
    if not built["importable"]:
        return f"installed but unusable: {built['error']}"  # names the rebuild command
    return ", ".join(f"{k}={'yes' if built[k] else 'no'}" for k in ("gloo", "mpi", "nccl", "cuda"))


def devices() -> DeviceInfo:
    import torch

    gpus: tuple[str, ...] = ()
    if torch.cuda.is_available():
        from lightning_mgpu.monitoring.peak_flops import dense_peak_flops, peak_phrase

        # torch already honours CUDA_VISIBLE_DEVICES: index i here is the i-th visible device, named with the GPU it is
        # on the machine (what nvidia-smi shows). Each shows the peak the GPU monitor's MFU uses, so a figure can be
        # checked against it.
        gpus = tuple(
            f"cuda:{i}{physical_note(i)} {torch.cuda.get_device_name(i)}"
            f" ({torch.cuda.get_device_properties(i).total_memory / 2**30:.1f} GiB,"
            f" {peak_phrase(dense_peak_flops(torch.device('cuda', i), torch.bfloat16))})"
            for i in range(torch.cuda.device_count())
        )
    return DeviceInfo(os.cpu_count() or 1, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus)


def physical_note(index: int, visible: str | None = None) -> str:
    """`` (physical GPU 6)`` where ``CUDA_VISIBLE_DEVICES`` maps ``cuda:index`` to another GPU of the machine, else
    ``""``."""
    from lightning_mgpu.utilities.devices import physical_device_ids

    try:
        (physical,) = physical_device_ids([index], visible)
    except ValueError:  # torch accepted an odd CUDA_VISIBLE_DEVICES; say nothing rather than guess
        return ""
    if physical == str(index):
        return ""
    return f" (physical GPU {physical})" if physical.isdigit() else f" ({physical})"  # a UUID or MIG name as written


def launch_command(name: str, dev: DeviceInfo) -> str:
    """The command that runs examples/train.py under registered strategy ``name`` on this machine."""
    n = len(dev.gpus) or 2
    acc = "gpu" if dev.gpus else "cpu"
    base = f"python examples/train.py --accelerator {acc} --strategy {name}"
    if name == "dp":
        # One process drives every visible GPU; on a CPU there is one device to drive.
        return f"{base} --devices {n}" if dev.gpus else f"{base} --devices 1   # one process, one CPU device"
    if name == "ddp2":
        # One process per node drives the node's devices with dp's engine; on a CPU a process drives 2 CPU devices.
        return f"{base} --devices {n}   # one process per node (torchrun --nproc-per-node 1 on several nodes)"
    if name == "horovod":
        return (
            f"horovodrun -np {n}{'' if dev.gpus else ' --gloo'} {base}   # or without horovodrun: {base} --devices {n}"
        )
    return f"{base} --devices {n}"


def launch_commands(dev: DeviceInfo, names: tuple[str, ...] | None = None) -> dict[str, str]:
    """The command for each strategy name (default: Lightning's ddp/ddp_spawn and every bundle name)."""
    if names is None:
        from lightning_mgpu.strategies.registry import BUNDLE_STRATEGY_NAMES

        names = ("ddp", "ddp_spawn", *BUNDLE_STRATEGY_NAMES)
    return {name: launch_command(name, dev) for name in names}


def _readiness(dependency: str | None, install_hint: str | None) -> str:
    if dependency is None or is_available(dependency):
        return "ready"
    from lightning_mgpu.utilities.imports import install_hint as extra_hint

    return f"needs {dependency}: {install_hint or extra_hint(dependency)}"


def _table(rows: Sequence[tuple[str, ...]], indent: str = "  ") -> list[str]:
    """Rows as columns sized to their longest cell (the last column runs free)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)] if rows else []
    return [indent + "  ".join([*(c.ljust(w) for c, w in zip(row, widths)), row[-1]]).rstrip() for row in rows]


def advisory_lines() -> list[str]:
    """``info``'s advisories section: each known advisory the installed packages have, with its id and the fixed
    version, or that none applies."""
    from lightning_mgpu.security import advisories

    found = advisories.applying()
    head = f"Security advisories (known as of {advisories.checked()}):"
    if not found:
        return [head, f"  none known for the installed {', '.join(advisories.PACKAGES)}"]
    return [head, *(f"  {advisory.describe(installed)}" for advisory, installed in found)]


def render() -> str:
    """The ``info`` report: versions, the advisories they have, every registered name with its readiness, devices,
    launch commands."""
    from lightning.pytorch.strategies import StrategyRegistry

    import lightning_mgpu
    from lightning_mgpu.strategies.registry import BUNDLE_STRATEGY_NAMES, strategy_dependency

    lines = [
        f"lightning_mgpu {lightning_mgpu.__version__}  (python {platform.python_version()}, {sys.platform})",
        "",
        "Packages:",
    ]
    import torch

    packages = [(dist, package_version(dist) or "not installed") for _, dist in _PACKAGES]
    packages += [("horovod build", horovod_build()), ("torch cuda", torch.version.cuda or "CPU build")]
    lines += _table(packages)
    lines += ["", *advisory_lines()]

    lines += ["", "Strategies (Trainer(strategy=NAME)):"]
    rows = []
    for name in ("ddp", "ddp_spawn", *BUNDLE_STRATEGY_NAMES):
        entry = StrategyRegistry[name] if name in StrategyRegistry else None
        if entry is None:
            rows.append((name, "NOT REGISTERED", "", ""))
            continue
        dependency = strategy_dependency(name)
        cls = entry["strategy"]
        owner = "lightning" if cls.__module__.startswith("lightning.") else "lightning_mgpu"
        ready = _readiness(dependency, None)
        rows.append((name, f"{cls.__name__} [{owner}]", ready, entry["description"] or ""))
    lines += _table(rows)

    dev = devices()
    lines += ["", "Devices:", f"  CPU cores: {dev.cpu_count}"]
    lines.append(
        f"  CUDA_VISIBLE_DEVICES: {dev.cuda_visible_devices if dev.cuda_visible_devices is not None else '(unset)'}"
    )
    lines += [f"  {g}" for g in dev.gpus] or ["  GPUs: none (CPU runs use the gloo backend)"]

    lines += ["", "Launch commands on this machine:"]
    lines += _table(list(launch_commands(dev).items()))
    return "\n".join(lines)


def info_main() -> int:
    sys.stdout.write(render() + "\n")
    return 0


def build_horovod_main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lightning_mgpu.tools.build_horovod import BuildConfig, HorovodBuildError, HorovodBuildRefused, build_horovod

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = BuildConfig(
        python=args.python or sys.executable,
        force=args.force,
        gpu=args.gpu,
        nvcc=args.nvcc,
        nccl_home=Path(args.nccl_home) if args.nccl_home else None,
    )
    try:
        build_horovod(config)
    except HorovodBuildError as err:
        sys.stderr.write(f"{PROG} build-horovod: error: {err}\n")
        return 2 if isinstance(err, HorovodBuildRefused) else 1  # 2: asked for what cannot be built here
    return 0


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' own parsers, by name (argparse keeps them on its private subparsers action)."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _command(sub: argparse._SubParsersAction, name: str, summary: str, details: str = "") -> OneLineParser:
    """A subcommand with its one-line summary in the command list and its description in its own --help."""
    return sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}." + (f"\n\n{details}" if details else ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> OneLineParser:
    """The command line (light: nothing here imports torch or Lightning)."""
    parser = OneLineParser(
        prog=PROG,
        description="Multi-GPU strategies, tools and checks for PyTorch Lightning 2.x (also: python -m"
        " lightning_mgpu).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    _command(
        sub,
        "info",
        "versions and their known security advisories, registered strategies and their readiness, devices, and the"
        " launch command of each strategy",
    )
    dash = _command(
        sub,
        "dashboard",
        "render a self-contained HTML dashboard of a run, or serve it live while training writes it",
        "RUN is a CSV-logger folder (metrics.csv), a TensorBoard log folder (events.out.tfevents.*) or a Neptune\n"
        "offline run folder (.neptune/offline/run__*).",
    )
    dash.add_argument(
        "run",
        nargs="+",
        help="the run's folder (CSV logger, TensorBoard or Neptune offline); several: one comparison page",
    )
    dash.add_argument(
        "--out",
        default=None,
        help="output folder (default: RUN/dashboard; a Neptune run: <data dir>/dashboards/<run>; several runs:"
        " <their common folder>/comparison)",
    )
    dash.add_argument("--no-png", action="store_true", help="write only the HTML page, not the charts as PNG")
    dash.add_argument("--serve", action="store_true", help="serve on 127.0.0.1 and refresh while training writes")
    dash.add_argument("--port", type=int, default=8050, help="port for --serve (0 picks a free one; default 8050)")
    dash.add_argument("--interval", type=float, default=3.0, help="seconds between re-reads under --serve (default 3)")
    upgrade = _command(
        sub,
        "upgrade",
        "rewrite Lightning 1.x multi-GPU scripts for Lightning 2.x and lightning_mgpu (prints a diff; --write applies)",
        "Every TODO(lightning-mgpu:RULE) it leaves names a rule: --explain RULE prints it in full.",
    )
    from lightning_mgpu.upgrade.run import add_arguments

    add_arguments(upgrade)
    convert = _command(
        sub,
        "convert",
        "turn a sharded checkpoint folder into one .ckpt file and back, or into .safetensors (the weights)",
    )
    convert.add_argument("src", help="a sharded checkpoint folder or a checkpoint file")
    convert.add_argument("out", help="the output path (must not exist); .safetensors writes the weights alone")
    convert.add_argument(
        "--to",
        default="auto",
        choices=("auto", "ckpt", "sharded", "safetensors"),
        help="auto: a folder becomes a .ckpt file, a file a folder, OUT.safetensors the weights (default: auto)",
    )
    convert.add_argument(
        "--trust-checkpoint",
        "--trusted",
        dest="trusted",
        action="store_true",
        help="SRC is a file you wrote yourself: read it with a full unpickle (unsafe otherwise), also on a torch older"
        " than 2.10, whose safe unpickler is refused",
    )
    hvd = _command(
        sub,
        "build-horovod",
        "build horovod 0.28.1 against this torch (C++17 patch, Gloo; --gpu: NCCL; cached)",
        "--gpu compiles the GPU operations on NCCL against a CUDA build of torch: it needs nvcc (the CUDA toolkit)"
        " and\nNCCL (pip install nvidia-nccl-cu<N>, or the system's libnccl-dev); the wheel is cached per torch and"
        " CUDA.",
    )
    hvd.add_argument(
        "--python", default=None, help="the interpreter whose environment gets horovod (default: this one)"
    )
    hvd.add_argument("--force", action="store_true", help="rebuild even if a suitable horovod is already importable")
    hvd.add_argument("--gpu", action="store_true", help="GPU operations on NCCL (needs a CUDA torch, nvcc and NCCL)")
    hvd.add_argument(
        "--nvcc", default=None, help="--gpu: the CUDA compiler (default: nvcc on the PATH, or CUDA_HOME's)"
    )
    hvd.add_argument("--nccl-home", default=None, help="--gpu: a folder with include/nccl.h and lib/libnccl.so*")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the command they were given to, as its own error
        (_subcommands(parser).get(args.command) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "info":
        return info_main()
    if args.command == "build-horovod":
        return build_horovod_main(args)
    if args.command == "convert":
        from pathlib import Path

        from lightning_mgpu.checkpoint.convert import main as convert_main

        args.src, args.out = Path(args.src), Path(args.out)
        return convert_main(args)
    if args.command == "upgrade":
        from lightning_mgpu.upgrade.run import main as upgrade_main

        return upgrade_main(args)
    runs = args.run
    if len(runs) > 1:
        if args.serve:
            _subcommands(parser)["dashboard"].error(
                "--serve shows one run live; compare runs without it (a static page)"
            )
        from lightning_mgpu.dashboard.compare import main as compare_main

        return compare_main(args)
    args.run = runs[0]
    if args.serve:
        from lightning_mgpu.dashboard.serve import main as serve_main

        return serve_main(args)
    from lightning_mgpu.dashboard.render import main as dashboard_main

    return dashboard_main(args)
