"""Train the example image classifier under any lightning_mgpu configuration.

One script for every strategy. The per-device batch size is fixed by --batch-size; the
effective batch is per-device batch x devices x nodes x gradient accumulation, and is printed
at start. --scale-lr multiplies --lr by devices x nodes x accumulation (linear scaling).

CPU, this machine (gloo), the default: ddp on 2 processes, digits data
    $ python examples/train.py
    $ python examples/train.py --strategy ddp_spawn --devices 2
    $ python examples/train.py --strategy sharded --devices 2          # ZeRO-2 (FairScale)
    $ python examples/train.py --strategy horovod --devices 2          # self-launches 2 Horovod workers
    $ horovodrun -np 2 --gloo python examples/train.py --strategy horovod
    $ python examples/train.py --strategy dp                           # one process; on CPU: single device
    $ python examples/train.py --strategy ddp2 --devices 2             # one process per node; on CPU: a device each

One node, 4 GPUs
    $ python examples/train.py --accelerator gpu --devices 4 --strategy ddp --precision bf16-mixed
    $ python examples/train.py --accelerator gpu --devices 4 --strategy dp
    $ python examples/train.py --accelerator gpu --devices 4 --strategy sharded --precision 16-mixed
    $ horovodrun -np 4 python examples/train.py --accelerator gpu --devices 4 --strategy horovod  # --devices: per host

Two nodes, 8 GPUs each, with torchrun (run on every node; rendezvous on node0; docs/multinode.md)
    $ torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint node0:29400 \\
          examples/train.py --strategy ddp --num-nodes 2 --devices 8 --accelerator gpu
    (the same with --strategy sharded; with --strategy ddp2 use --nproc-per-node 1: one process drives the node's
    GPUs with DataParallel, docs/ddp2.md; tests/integration/examples/test_multinode.py runs these lines on two network
    namespaces, 1 process each. Where node0's host name does not resolve to its address, add
    `--rdzv-conf is_host=1` on node0 and `--local-addr <this node's address>` on every node.)

Two nodes under SLURM: examples/slurm.sbatch (srun, one task per GPU; --devices = --ntasks-per-node)
    $ sbatch examples/slurm.sbatch

Two nodes with Horovod
    any$   horovodrun -np 16 -H node0:8,node1:8 python examples/train.py --accelerator gpu --devices 8 --strategy
    horovod

On a Ray cluster with Ray Train (--launcher ray; docs/multinode.md). Ray places the workers and restarts them
    $ python examples/train.py --launcher ray --ray-workers 2 --strategy ddp            # a local Ray for this run
    $ python examples/train.py --launcher ray --ray-workers 8 --ray-address auto --accelerator gpu \\
          --strategy sharded --max-failures 3 --preprocess ray                          # join the cluster; cache on it
    (`--ray-workers` counts processes, one device each; `--num-workers` stays the DataLoader's workers per process.
    tests/integration/launchers/test_ray_train.py runs both forms on CPU, joining a two-node Ray cluster by address.)

GPU monitoring, with its time line in the logger you use (docs/monitoring.md has each logger's names)
    $ python examples/train.py --gpu-monitor --logger mlflow          # or tensorboard, csv, neptune
    $ python examples/train.py --gpu-monitor --logger wandb           # W&B, offline unless WANDB_MODE=online:
                                                                      # OUTPUT_DIR/wandb/offline-run-*, a run per rank

Resume from a checkpoint
    $ python examples/train.py --ckpt-path outputs/checkpoints/last.ckpt --max-epochs 20
    Ctrl-C finishes the current step, saves outputs/checkpoints/last.ckpt and exits with 130 (--no-save-on-interrupt:
    stop without saving). Resuming from it, even mid-epoch, ends with the parameters of a run never interrupted.

At the end, rank 0 writes OUTPUT_DIR/summary.json (strategy, world size, effective batch,
final val_acc/val_loss, training samples/s, wall seconds, checkpoint path).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The command line is read and checked first, with nothing heavier than the standard library: a typo or an
# impossible setting is refused at once, before Lightning and torch are imported (seconds) or any process starts.
from lightning_mgpu.cli import OneLineParser
from lightning_mgpu.launchers import DEFAULT_RENDEZVOUS_TIMEOUT_S
from lightning_mgpu.utilities.files import checkpoint_path_problem
from lightning_mgpu.utilities.strategy_names import BUNDLE_STRATEGY_NAMES, FSDP2_NAMES, SHARDED_NAMES

# Lightning's own launch-style names, then every name the bundle registers.
STRATEGIES = ("auto", "ddp", "ddp_spawn", *BUNDLE_STRATEGY_NAMES)
PRECISIONS = ("auto", "32-true", "32", "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true")


def _devices(value: str) -> int | str | list[int]:
    """``2`` -> 2 devices, ``auto`` -> all, ``0,2`` -> those device indices."""
    if value == "auto":
        return value
    try:
        if "," in value:
            return [int(v) for v in value.split(",") if v != ""]
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--devices must be an integer, 'auto' or a list like '0,1'; got {value!r}"
        ) from None
    if n < 1 and n != -1:
        raise argparse.ArgumentTypeError(f"--devices must be >= 1 (or -1 for all); got {n}")
    return n


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def _non_negative_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}") from None
    if not x >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {x}")
    return x


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {x}")
    return x


def build_parser() -> argparse.ArgumentParser:
    """The command line (every flag shows its default in --help; docs/train.md is checked against it)."""
    p = OneLineParser(
        prog="train.py",
        usage="train.py [--strategy NAME] [--devices N] [--accelerator {auto,cpu,gpu}] [options]",
        description=__doc__,
        formatter_class=_Help,
    )
    p.add_argument(
        "--strategy",
        default="ddp",
        choices=STRATEGIES,
        metavar="NAME",
        help=f"one of: {', '.join(STRATEGIES)}",
    )
    p.add_argument("--accelerator", default="auto", choices=("auto", "cpu", "gpu"), help="the device type")
    p.add_argument(
        "--devices",
        default=None,
        type=_devices,
        help="per node: a count, 'auto', -1 (every GPU) or GPU indices like '0,1' (default: 2; 1 under --launcher ray)",
    )
    p.add_argument("--num-nodes", default=1, type=_positive_int, help="nodes (machines) in the job")
    p.add_argument(
        "--precision", default="32-true", choices=PRECISIONS, help="'auto' picks bf16/16-mixed/32 for the hardware"
    )
    p.add_argument("--accumulate-grad-batches", default=1, type=_positive_int, help="micro-batches per optimizer step")
    p.add_argument("--max-epochs", default=8, type=_positive_int, help="epochs to train")
    p.add_argument("--max-steps", default=-1, type=int, help="-1: no step limit")
    p.add_argument("--batch-size", default=32, type=_positive_int, help="per device")
    p.add_argument("--lr", default=0.05, type=_positive_float, help="learning rate (see --scale-lr)")
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adam", "adamw"), help="the optimizer")
    p.add_argument("--weight-decay", default=0.0, type=_non_negative_float, help="the optimizer's weight decay")
    p.add_argument("--scale-lr", action="store_true", help="multiply --lr by devices x nodes x accumulation")
    p.add_argument("--seed", default=42, type=int, help="seed of every rank's RNGs (each rank offsets it)")
    p.add_argument("--debug", action="store_true", help="on bad input, show the traceback under the message")
    # On GPUs, cuDNN's default kernels add in a varying order: an exact resume (bitwise) needs deterministic ones.
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic kernels (Trainer(deterministic=True)); on GPUs set CUBLAS_WORKSPACE_CONFIG=:4096:8",
    )
    p.add_argument(
        "--data", default="digits", choices=("digits", "synthetic"), help="the 8x8 digits shipped with the bundle"
    )
    p.add_argument("--num-workers", default=0, type=int, help="DataLoader workers per process")
    p.add_argument(
        "--logger",
        default="csv",
        choices=("none", "csv", "tensorboard", "mlflow", "neptune", "wandb"),
        help="where metrics go (with --gpu-monitor, the time line too: docs/monitoring.md); mlflow: the run in"
        " $MLFLOW_TRACKING_URI, else a file store in OUTPUT_DIR/mlruns; wandb: $WANDB_MODE (offline by default),"
        " into OUTPUT_DIR/wandb",
    )
    p.add_argument(
        "--output-dir", default="outputs", type=Path, help="logs, checkpoints and summary.json (created if missing)"
    )
    p.add_argument(
        "--ckpt-path", default=None, type=Path, help="resume from this checkpoint (a file or a sharded folder)"
    )
    p.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="--ckpt-path is a checkpoint you wrote yourself: read it with a full unpickle, also on a torch older than"
        " 2.10, whose safe unpickler refuses every checkpoint (GHSA-63cw-57p8-fm3p)",
    )
    p.add_argument(
        "--fsdp2-mp",
        default="none",
        choices=("none", "bf16", "fp16"),
        help="sharded_fsdp2: gather and compute parameters in this dtype, reduce gradients in fp32"
        " (MixedPrecisionPolicy)",
    )
    p.add_argument(
        "--fsdp2-offload",
        action="store_true",
        help="sharded_fsdp2: shards, gradients and optimizer state in CPU memory (CPUOffloadPolicy)",
    )
    p.add_argument(
        "--checkpoint-format",
        default="auto",
        choices=("auto", "sharded", "full"),
        help="sharded strategies: 'sharded' = each rank writes its shards into a folder, nothing gathered"
        " (sharded_fsdp2's default; sharded/ddp_sharded write each rank's optimizer shard); 'full' = one file"
        " consolidated on rank 0 (the default of sharded/ddp_sharded)",
    )
    p.add_argument(
        "--async-save",
        action="store_true",
        help="sharded folders: write each checkpoint in the background while training goes on (DCP async_save)",
    )
    p.add_argument(
        "--resume",
        default="auto",
        choices=("auto", "never"),
        help="auto: when the launcher restarts the job (torchrun --max-restarts), resume from"
        " OUTPUT_DIR/checkpoints/last.ckpt",
    )
    p.add_argument(
        "--save-on-interrupt",
        default=True,
        action=argparse.BooleanOptionalAction,
        help="on Ctrl-C, finish the step, save OUTPUT_DIR/checkpoints/last.ckpt and stop (a second Ctrl-C stops at"
        " once)",
    )
    p.add_argument(
        "--rdzv-timeout",
        default=DEFAULT_RENDEZVOUS_TIMEOUT_S,
        type=_positive_float,
        metavar="SECONDS",
        help=f"seconds to reach MASTER_ADDR:MASTER_PORT and for every process to join (--launcher ray: to reach"
        f" --ray-address) before failing with the address named (default {DEFAULT_RENDEZVOUS_TIMEOUT_S:g})",
    )
    p.add_argument("--sync-batchnorm", action="store_true", help="synchronise BatchNorm statistics across processes")
    p.add_argument("--gradient-clip-val", default=None, type=_positive_float, help="clip gradients to this norm")
    # Callbacks (lightning_mgpu.callbacks)
    p.add_argument(
        "--activation-checkpointing",
        default=None,
        metavar="PATTERN",
        help="checkpoint submodules matching PATTERN, e.g. 'features.*'",
    )
    p.add_argument("--zero-grad-set-to-none", action="store_true", help="guarantee .grad is None between steps")
    p.add_argument(
        "--grad-sync-toggle", action="store_true", help="skip gradient sync on non-final accumulation micro-batches"
    )
    p.add_argument("--gpu-monitor", action="store_true", help="log per-rank utilisation and diagnose bottlenecks")
    p.add_argument(
        "--monitor-interval",
        default=0.5,
        type=_positive_float,
        metavar="SECONDS",
        help="--gpu-monitor: seconds between samples of the devices (the time line's resolution)",
    )
    # Ray Train (lightning_mgpu.launchers.ray_train)
    p.add_argument(
        "--launcher",
        default="lightning",
        choices=("lightning", "ray"),
        help="lightning: Lightning's launcher, or the torchrun/SLURM/horovodrun that started this script; ray: Ray"
        " Train workers",
    )
    p.add_argument(
        "--ray-workers", default=2, type=_positive_int, help="--launcher ray: training processes, one device each"
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="--launcher ray: 'auto', HOST:PORT or ray://HOST:PORT (default: a local Ray for this run)",
    )
    p.add_argument(
        "--max-failures",
        default=0,
        type=int,
        help="--launcher ray: restarts of the worker group after a failure (-1: no limit)",
    )
    p.add_argument(
        "--ray-cpus-per-worker", default=1.0, type=_positive_float, help="--launcher ray: CPUs reserved per worker"
    )
    # Data preprocessing (lightning_mgpu.data)
    p.add_argument(
        "--preprocess", default="none", choices=("none", "processes", "ray"), help="cache an expensive transform once"
    )
    p.add_argument("--cache-dir", default=None, type=Path, help="preprocessing cache (default: OUTPUT_DIR/cache)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check the command line: bad input exits 2 with one line, before anything heavy is imported."""
    p = build_parser()
    args = p.parse_args(argv)
    _check_launcher_args(p, args)
    _check_paths(p, args)
    _check_logger(p, args)
    if args.devices is None:
        args.devices = 1 if args.launcher == "ray" else 2  # under Ray, --ray-workers counts the processes
    if args.activation_checkpointing is not None and not args.activation_checkpointing.strip():
        p.error("--activation-checkpointing needs a pattern of module names, e.g. 'features.*'")
    if args.num_workers < 0:
        p.error(f"--num-workers must be >= 0, got {args.num_workers}")
    if args.max_steps < -1 or args.max_steps == 0:
        p.error(f"--max-steps must be -1 (no limit) or >= 1, got {args.max_steps}")
    if args.checkpoint_format != "auto" and args.strategy not in SHARDED_NAMES:
        p.error(
            f"--checkpoint-format chooses how a sharded strategy saves; {args.strategy!r} always saves one file. Use it"
            " with --strategy sharded, sharded_zero or sharded_fsdp2 (or their _spawn and 1.x names), or leave it out"
        )
    sharded_folders = args.checkpoint_format == "sharded" or (
        args.checkpoint_format == "auto" and args.strategy in FSDP2_NAMES
    )
    if args.async_save and not (args.strategy in SHARDED_NAMES and sharded_folders):
        p.error(
            "--async-save writes sharded checkpoint folders in the background: use it with --strategy sharded_fsdp2,"
            f" or --strategy sharded --checkpoint-format sharded (not --strategy {args.strategy!r}"
            f"{' --checkpoint-format ' + args.checkpoint_format if args.checkpoint_format != 'auto' else ''})"
        )
    if args.async_save and args.launcher == "ray":
        p.error(
            "--async-save cannot run under --launcher ray: Ray's report callback copies each checkpoint as soon as the"
            " save returns, before a background save has landed. Leave --async-save out under Ray"
        )
    if (args.fsdp2_mp != "none" or args.fsdp2_offload) and args.strategy not in FSDP2_NAMES:
        p.error(
            "--fsdp2-mp and --fsdp2-offload are FSDP2's policies: use --strategy sharded_fsdp2 (not"
            f" {args.strategy!r}); other strategies take --precision"
        )
    if args.fsdp2_mp != "none" and args.precision not in ("32-true", "32"):
        p.error(
            f"--fsdp2-mp {args.fsdp2_mp} already sets the compute dtype: leave --precision at 32-true (got"
            f" {args.precision})"
        )
    if args.preprocess != "none" and args.data != "digits":
        p.error("--preprocess demonstrates the cache on the digits data; use it with --data digits")
    on_cpu = args.accelerator == "cpu" or (args.accelerator == "auto" and not _cuda_available())
    _check_devices(p, args, on_cpu)
    if args.fsdp2_offload and on_cpu:
        p.error(
            "--fsdp2-offload keeps FSDP2's shards in CPU memory between their uses on a GPU; without a GPU they are"
            " there already: leave it out"
        )
    if args.launcher == "ray" and on_cpu and args.ray_address is None and args.ray_workers > (os.cpu_count() or 1):
        p.error(
            f"--ray-workers {args.ray_workers} asks for more local CPU workers than the {os.cpu_count()} cores here;"
            f" pass --ray-workers {os.cpu_count()} or fewer, or --ray-address to use a cluster"
        )
    if on_cpu and args.precision in ("16-mixed", "16-true", "16"):
        p.error(
            f"--precision {args.precision} needs a CUDA GPU (float16 autocast on CPU is slow and unscaled); on CPU use"
            " --precision bf16-mixed or 32-true, or --precision auto to pick for the hardware"
        )
    if on_cpu and isinstance(args.devices, int) and args.devices > (os.cpu_count() or 1):
        p.error(
            f"--devices {args.devices} asks for {args.devices} CPU training processes, but this machine has"
            f" {os.cpu_count()} cores; pass --devices {os.cpu_count()} or fewer (each process needs at least a core)"
        )
    return args


def _check_launcher_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Ray-only flags without ``--launcher ray``, or flags Ray decides itself, are refused before anything starts."""
    if args.launcher != "ray":
        given = [
            f
            for f, v in (("--ray-address", args.ray_address), ("--max-failures", args.max_failures or None))
            if v is not None
        ]
        if given:
            p.error(f"{', '.join(given)} only apply to --launcher ray; add --launcher ray or drop them")
        return
    if args.devices is not None or args.num_nodes != 1:
        p.error(
            "under --launcher ray, Ray places the workers: pass --ray-workers N (the total, one device each)"
            " instead of --devices/--num-nodes"
        )
    if args.max_failures < -1:
        p.error(f"--max-failures must be -1 (no limit), 0 or more; got {args.max_failures}")
    if args.ckpt_path is not None:
        p.error(
            "--ckpt-path is not supported with --launcher ray yet: Ray resumes a restarted group from its own last"
            " reported checkpoint; resume an earlier run with the default launcher"
        )
    from lightning_mgpu.launchers.ray_train import RayStrategyError, check_strategy
    from lightning_mgpu.utilities.imports import MissingDependencyError, require

    try:
        require("ray.train", "--launcher ray")
        check_strategy(args.strategy)
    except (RayStrategyError, MissingDependencyError) as err:
        p.error(str(err))


def _check_logger(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A logger whose package is missing is refused here, naming the extra, before any process starts."""
    from lightning_mgpu.utilities.imports import install_hint, is_available

    package = {"mlflow": "mlflow", "tensorboard": "tensorboard", "neptune": "neptune", "wandb": "wandb"}.get(
        args.logger
    )
    # TensorBoardLogger also writes through tensorboardX; the others have one package.
    if (
        package is not None
        and not is_available(package)
        and not (package == "tensorboard" and is_available("tensorboardX"))
    ):
        p.error(f"--logger {args.logger} needs `{package}`: {install_hint(package)}")


def _check_paths(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checkpoint to resume from, and the folders the run writes, before any process starts."""
    if args.ckpt_path is not None:
        problem = checkpoint_path_problem(args.ckpt_path)
        if problem is not None:
            p.error(f"--ckpt-path {problem}")
    for flag, path in (("--output-dir", args.output_dir), ("--cache-dir", args.cache_dir)):
        if path is None:
            continue
        if path.exists() and not path.is_dir():
            p.error(f"{flag} {str(path)!r} is a file, not a folder; pass a folder (it is created if missing)")
        problem = _unwritable(path)
        if problem is not None:
            p.error(f"{flag} {str(path)!r} cannot be written ({problem}); pass a folder you can write to")


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot hold the run's files, or None. Nothing is created: a file is opened and dropped at once
    in the folder, or in its nearest existing parent (where the run would create it). Every rank of a job checks at
    the same moment, so the check must not make or remove folders another rank may be using."""
    parent = folder
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file"
    try:
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as err:
        return err.strerror or str(err)
    return None


def _check_devices(p: argparse.ArgumentParser, args: argparse.Namespace, on_cpu: bool) -> None:
    """--accelerator and --devices against the hardware that is here."""
    if args.launcher == "ray":
        return  # Ray places the workers (--ray-workers); --devices is refused above
    if args.accelerator == "gpu" and not _cuda_available():
        p.error("--accelerator gpu: no CUDA GPU is visible here; use --accelerator cpu (or auto)")
    if on_cpu and args.devices == -1:
        p.error("--devices -1 means every GPU, and this run is on the CPU; pass a count of processes, e.g. --devices 2")
    if on_cpu and isinstance(args.devices, list):
        p.error(
            f"--devices {','.join(map(str, args.devices))} picks GPUs by index, and this run is on the CPU; pass a"
            " count of processes, e.g. --devices 2"
        )
    if not on_cpu:
        count = _cuda_count()
        wanted = max(args.devices) + 1 if isinstance(args.devices, list) and args.devices else args.devices
        if isinstance(wanted, int) and wanted > count:
            p.error(
                f"--devices {args.devices if not isinstance(args.devices, list) else ','.join(map(str, args.devices))}"
                f" asks for GPUs that are not here: {count} visible; pass --devices {count} or fewer"
            )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring as written, and every flag's default (a help text that states its own default keeps it)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


if __name__ == "__main__":
    ARGS = parse_args(sys.argv[1:])  # exits 2 with one line on bad input, before the imports below

# Only now the heavy part: Lightning, torch and the bundle's strategies (importing them registers the names).
import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.strategies import StrategyRegistry
from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from lightning.pytorch.utilities import rank_zero_only
from torch.multiprocessing import ProcessExitedException

import lightning_mgpu  # noqa: F401  (registers dp, horovod, sharded, ... with Lightning)
from lightning_mgpu.callbacks import CleanExit, RNGStates, SaveOnInterrupt
from lightning_mgpu.checkpoint.io import (
    AtomicCheckpointIO,
    CheckpointKeyMismatchError,
    CheckpointReadError,
    UnsafeCheckpointError,
    check_checkpoint_matches,
)
from lightning_mgpu.checkpoint.sharded import is_sharded_checkpoint
from lightning_mgpu.data.cache import CacheError
from lightning_mgpu.demos import (
    DigitsDataModule,
    ImageClassifier,
    SyntheticImageDataModule,
)
from lightning_mgpu.launchers.rendezvous import RendezvousTimeout
from lightning_mgpu.launchers.torchrun import init_process_group_for_restart
from lightning_mgpu.utilities._compat import UnsupportedTorchError
from lightning_mgpu.utilities.capabilities import capability
from lightning_mgpu.utilities.imports import MissingDependencyError
from lightning_mgpu.utilities.ports import PortInUseError, check_master_port
from lightning_mgpu.utilities.signals import interrupts_to_workers


class TrainingThroughput(Callback):
    """Training samples/s over the whole fit, excluding validation and sanity checks.

    Logged as ``train_samples_per_sec`` so it reaches ``trainer.callback_metrics``, which
    Lightning carries back to the main process under ``ddp_spawn``.
    """

    def __init__(self) -> None:
        self.samples = 0
        self.seconds = 0.0
        self._t0: float | None = None
        self._val_t0: float | None = None
        self._val_seconds = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._t0, self._val_seconds = time.perf_counter(), 0.0

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.samples += len(batch[0])

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._val_t0 is not None:
            self._val_seconds += time.perf_counter() - self._val_t0
            self._val_t0 = None

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._t0 is None:
            return
        self.seconds += time.perf_counter() - self._t0 - self._val_seconds
        self._t0 = None
        # Each process counts its own shard; dp runs one process that sees the global batch.
        rate = self.samples * trainer.world_size / max(self.seconds, 1e-9)
        pl_module.log("train_samples_per_sec", float(rate), rank_zero_only=True)
        # ddp_spawn hands callback_metrics (not the trainer's counters) back to the main process.
        pl_module.log("global_step", float(trainer.global_step), rank_zero_only=True)


def strategy_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The sharded strategy options chosen on the command line (checkpoint format, FSDP2's policies)."""
    overrides: dict[str, Any] = {}
    if args.checkpoint_format != "auto":
        overrides["checkpoint_format"] = args.checkpoint_format
    if args.async_save:
        overrides["async_save"] = True
    if args.fsdp2_mp != "none" or args.fsdp2_offload:
        import torch
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

        if args.fsdp2_mp != "none":
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.fsdp2_mp]
            overrides["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        if args.fsdp2_offload:
            overrides["offload_policy"] = CPUOffloadPolicy()
    return overrides


def restart_checkpoint(args: argparse.Namespace) -> Path | None:
    """Under ``--resume auto``, the checkpoint a restarted job resumes from: ``OUTPUT_DIR/checkpoints/last.ckpt``.

    torchrun sets ``TORCHELASTIC_RESTART_COUNT`` > 0 when it restarts the workers after a failure. Checkpoints land
    atomically, so ``last.ckpt`` is always a complete one; a first run (count 0) starts fresh even if an old
    ``last.ckpt`` is there (pass ``--ckpt-path`` to continue an earlier job on purpose).
    """
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    last = args.output_dir / "checkpoints" / "last.ckpt"
    if args.resume != "auto" or restarts == 0:
        return None
    if not (last.is_file() or is_sharded_checkpoint(last)):
        say(f"restart {restarts}: no {last} yet, starting from the beginning")
        return None
    say(f"restart {restarts}: resuming from {last}")
    return last


def check_world_size(trainer: pl.Trainer, args: argparse.Namespace) -> None:
    """Refuse ``--devices``/``--num-nodes`` that disagree with the processes the launcher started.

    Under torchrun or SLURM the launcher decides the world; Lightning trusts its environment, so a mismatch would
    otherwise train with a wrong effective batch and rank layout (or hang in the rendezvous).
    """
    if capability(trainer.strategy, "loads_node_batch"):
        return  # one process per node drives its devices (dp, ddp2); those strategies check their own topology
    expected = trainer.num_devices * trainer.num_nodes
    if trainer.world_size != expected:
        raise SystemExit(
            f"error: the launcher started {trainer.world_size} training processes, but --devices {trainer.num_devices}"
            f" x --num-nodes {trainer.num_nodes} = {expected}. Make them agree: --devices must equal the processes per"
            " node (SLURM: --ntasks-per-node; torchrun: --nproc-per-node) and --num-nodes the nodes"
            " (--nodes/--nnodes)."
        )


def data_parallel_degree(trainer: pl.Trainer) -> int:
    """How many model replicas share each optimizer step (dp: devices of one process)."""
    return max(trainer.world_size, trainer.num_devices * trainer.num_nodes)


def build_logger(args: argparse.Namespace) -> Any:
    if args.logger == "none":
        return False
    if args.logger == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(args.output_dir, name="logs")
    if args.logger == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        return TensorBoardLogger(args.output_dir, name="tb")
    if args.logger == "mlflow":
        from lightning.pytorch.loggers import MLFlowLogger

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:
            # A local run needs no server: a file store in the output folder. MLflow 3.7+ keeps that store behind
            # MLFLOW_ALLOW_FILE_STORE (its default is sqlite, which needs the full `mlflow`); set here, in every rank,
            # unless the user chose otherwise.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = f"file:{(args.output_dir / 'mlruns').resolve()}"
        return MLFlowLogger(experiment_name="lightning_mgpu", tracking_uri=uri)
    if args.logger == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        # Offline unless told otherwise (no account needed; `wandb sync OUTPUT_DIR/wandb/offline-run-*` uploads later).
        # A group, so that the other ranks' runs (the monitor's time line, one run per process) sit with rank 0's.
        return WandbLogger(
            project=os.environ.get("WANDB_PROJECT", "lightning_mgpu"),
            save_dir=str(args.output_dir),
            group=os.environ.get("WANDB_RUN_GROUP") or f"train-{time.strftime('%Y%m%d-%H%M%S')}",
            mode=os.environ.get("WANDB_MODE", "offline"),
        )
    from lightning_mgpu.loggers import NeptuneLogger

    # Offline by default: the hosted service is gone; sync the folder to a self-hosted server later.
    return NeptuneLogger(mode=os.environ.get("NEPTUNE_MODE", "offline"), project=os.environ.get("NEPTUNE_PROJECT"))


def build_callbacks(args: argparse.Namespace) -> list[Callback]:
    callbacks: list[Callback] = [
        ModelCheckpoint(  # the best epoch
            dirpath=args.output_dir / "checkpoints",
            filename="epoch{epoch:02d}-val_acc{val_acc:.4f}",
            auto_insert_metric_name=False,
            monitor="val_acc",
            mode="max",
        ),
        # last.ckpt after every epoch. Not `save_last=True` above: Lightning 2.6 then writes last.ckpt only when the
        # epoch is also a new best, and a restart would resume from an older epoch and train it again.
        ModelCheckpoint(dirpath=args.output_dir / "checkpoints", filename="last", enable_version_counter=False),
        TrainingThroughput(),
        # Releases the process group after success (a gloo worker can otherwise abort at exit), and under ddp
        # names a rank that died (rank 0 otherwise sees only "Connection reset by peer").
        CleanExit(),
        # Every rank's RNGs go into each checkpoint: a resumed run draws what the first run would have.
        RNGStates(),
    ]
    if args.save_on_interrupt:
        callbacks.append(SaveOnInterrupt())  # into ModelCheckpoint's folder, as last.ckpt
    if args.activation_checkpointing or args.zero_grad_set_to_none or args.grad_sync_toggle or args.gpu_monitor:
        from lightning_mgpu import callbacks as mgpu_callbacks

        if args.activation_checkpointing:
            callbacks.append(mgpu_callbacks.ActivationCheckpointing(modules=[args.activation_checkpointing]))
        if args.zero_grad_set_to_none:
            callbacks.append(mgpu_callbacks.ZeroGradSetToNone())
        if args.grad_sync_toggle:
            callbacks.append(mgpu_callbacks.GradSyncToggle())
        if args.gpu_monitor:
            callbacks.append(mgpu_callbacks.GPUUtilizationMonitor(sample_interval_s=args.monitor_interval))
    return callbacks


def resolve_precision(args: argparse.Namespace, callbacks: list[Callback]) -> str:
    if args.precision != "auto":
        return args.precision
    from lightning_mgpu.callbacks import AutoMixedPrecision

    amp = AutoMixedPrecision()
    callbacks.append(amp)
    return amp.resolve_precision(args.accelerator)


def build_datamodule(args: argparse.Namespace, loader_batch_size: int) -> pl.LightningDataModule:
    if args.data == "synthetic":
        return SyntheticImageDataModule(batch_size=loader_batch_size, num_workers=args.num_workers, seed=args.seed)
    if args.preprocess != "none":
        from lightning_mgpu.demos.digits_preprocessed import (
            digits_preprocessed_datamodule,
        )

        cache_dir = args.cache_dir or args.output_dir / "cache"
        return digits_preprocessed_datamodule(
            cache_dir=cache_dir, backend=args.preprocess, batch_size=loader_batch_size, num_workers=args.num_workers
        )
    return DigitsDataModule(batch_size=loader_batch_size, num_workers=args.num_workers, seed=args.seed)


def fit(trainer: pl.Trainer, model: pl.LightningModule, dm: pl.LightningDataModule, ckpt_path: Path | None) -> None:
    """``trainer.fit``, turning Ctrl-C into exit code 130 with the checkpoint to resume from."""
    # A spawn launcher only waits for its workers: let them handle Ctrl-C (save, then stop) instead of dying first.
    spawn = isinstance(trainer.strategy.launcher, _MultiProcessingLauncher)
    saver = next((c for c in trainer.callbacks if isinstance(c, SaveOnInterrupt)), None)
    rendezvous = next((c for c in trainer.callbacks if isinstance(c, RendezvousTimeout)), None)
    with interrupts_to_workers() if spawn else contextlib.nullcontext():
        try:
            trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
            return
        except RuntimeError as exc:
            # A node that never came or an address nobody listens on: name it, not torch's socket trace.
            err = rendezvous.explain(exc, trainer.global_rank) if rendezvous is not None else None
            if err is None:
                raise
            raise SystemExit(f"error: {err}") from exc
        except ProcessExitedException as exc:
            if exc.exit_code != 130:
                raise
            saved = True  # a spawned worker exits 130 only after SaveOnInterrupt's save
        except SystemExit:  # Lightning's exit after a KeyboardInterrupt
            if trainer.state.status != "interrupted":
                raise
            saved = saver is not None and saver.saved_path is not None  # set in this process when it saved
    if saved and saver is not None:
        path = saver.checkpoint_path(trainer)
        say(f"Interrupted: saved {path}. Resume with: python examples/train.py ... --ckpt-path {path}")
    else:
        say("Interrupted without saving the current step (--no-save-on-interrupt, or a second Ctrl-C).")
    raise SystemExit(130)


@rank_zero_only
def say(msg: str) -> None:
    print(msg, flush=True)


def train(
    args: argparse.Namespace, on_ray: bool = False, ckpt_path: Path | None = None
) -> tuple[pl.Trainer, dict[str, Any]]:
    """Build the Trainer, module and data from ``args``, print the topology once, and fit.

    ``on_ray``: this process is a Ray Train worker; Ray's environment, strategy form and report callback are used,
    and ``ckpt_path`` is the checkpoint Ray handed a restarted worker.
    """
    pl.seed_everything(args.seed, workers=True, verbose=False)
    # A checkpoint this job wrote itself (Ray's, or last.ckpt after a torchrun restart) is trusted; --ckpt-path only
    # with --trust-checkpoint (checkpoints are read as data otherwise; SECURITY.md).
    ckpt_path = ckpt_path or args.ckpt_path or (None if on_ray else restart_checkpoint(args))
    trusted = args.trust_checkpoint or (ckpt_path is not None and ckpt_path != args.ckpt_path)
    callbacks = build_callbacks(args)
    rendezvous = None if on_ray else RendezvousTimeout(args.rdzv_timeout)
    if rendezvous is not None:
        callbacks.append(rendezvous)
    precision = resolve_precision(args, callbacks)
    placement: dict[str, Any] = {"strategy": args.strategy, "devices": args.devices, "num_nodes": args.num_nodes}
    overrides = strategy_overrides(args)
    if overrides:  # the registered preset, with these options
        preset = StrategyRegistry[args.strategy]
        placement["strategy"] = preset["strategy"](
            **{**preset["init_params"], **overrides}, checkpoint_io=AtomicCheckpointIO(trusted)
        )
    if on_ray:
        from lightning_mgpu.launchers import ray_train

        # The strategy instance carries the checkpoint IO (Lightning refuses it in both the instance and plugins).
        # --checkpoint-format and FSDP2's policies apply under Ray as well.
        strategy = ray_train.ray_strategy(args.strategy, checkpoint_io=AtomicCheckpointIO(trusted), **overrides)
        placement = {"strategy": strategy, **ray_train.ray_trainer_kwargs()}
        callbacks.append(ray_train.report_callback())  # metrics and a checkpoint to Ray at each epoch end
        # Ray runs this function outside the main thread, where no signal reaches it: Ctrl-C at the driver ends the
        # run through Ray, and a restart resumes from the last reported checkpoint.
        callbacks = [c for c in callbacks if not isinstance(c, SaveOnInterrupt)]
    # Atomic saves (temporary file, fsync, rename) and safe loads, for Lightning's own strategies too.
    # (A bundle strategy instance carries it already: Lightning refuses it in both places.)
    plugins = [
        *placement.pop("plugins", []),
        *([] if on_ray or not isinstance(placement["strategy"], str) else [AtomicCheckpointIO(trusted)]),
    ]
    trainer = pl.Trainer(
        **placement,
        accelerator=args.accelerator,
        precision=precision,
        accumulate_grad_batches=args.accumulate_grad_batches,
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        logger=build_logger(args),
        callbacks=callbacks,
        default_root_dir=args.output_dir,
        sync_batchnorm=args.sync_batchnorm,
        gradient_clip_val=args.gradient_clip_val,
        deterministic=args.deterministic,
        enable_model_summary=False,
        plugins=plugins,
    )
    if on_ray:
        trainer = ray_train.prepare_trainer(trainer)
    else:
        check_world_size(trainer, args)
    degree = data_parallel_degree(trainer)
    # dp and ddp2 run one process per node whose loader batch is split across its devices; everyone else loads one
    # per-device batch per process.
    loader_batch = args.batch_size * (trainer.num_devices if capability(trainer.strategy, "loads_node_batch") else 1)
    effective_batch = args.batch_size * degree * args.accumulate_grad_batches
    factor = degree * args.accumulate_grad_batches
    lr = args.lr * factor if args.scale_lr else args.lr
    layout = (
        f"{trainer.world_size} Ray workers" if on_ray else f"{trainer.num_devices} devices x {trainer.num_nodes} nodes"
    )
    say(
        f"strategy={args.strategy} world_size={trainer.world_size} devices x nodes={degree}"
        f" effective batch = {args.batch_size} per device x {layout}"
        f" x {args.accumulate_grad_batches} accumulation = {effective_batch}; lr={lr:g}"
        + (f" (--lr {args.lr:g} x {factor}, --scale-lr)" if args.scale_lr else "")
    )

    dm = build_datamodule(args, loader_batch)
    image_shape = getattr(dm, "image_shape", (1, 8, 8))
    model = ImageClassifier(
        in_channels=image_shape[0],
        num_classes=getattr(dm, "num_classes", 10),
        lr=lr,
        weight_decay=args.weight_decay,
        optimizer=args.optimizer,
    )
    if ckpt_path is not None:
        # Refuse a truncated, unsafe or foreign checkpoint here, before any worker starts, with the keys listed.
        check_checkpoint_matches(model, ckpt_path, trusted=trusted)
    if not on_ray:
        # A pinned MASTER_PORT still held by a killed run fails deep in torch; say so up front.
        check_master_port()
        # Bound the wait for the main address and the other nodes; collectives keep their own timeout.
        if rendezvous is not None:
            rendezvous.apply(trainer.strategy)
        # After a torchrun restart: a process group on this round's keys, not the dead round's (launchers/torchrun.py).
        init_process_group_for_restart(trainer.strategy)
    start = time.perf_counter()
    fit(trainer, model, dm, ckpt_path)
    facts = {
        "degree": degree,
        "effective_batch": effective_batch,
        "lr": lr,
        "precision": str(precision),
        "wall": time.perf_counter() - start,
    }
    return trainer, facts


def ray_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: train from ``config["args"]``, resuming from Ray's checkpoint after a restart."""
    from lightning_mgpu.launchers import ray_train

    with ray_train.resume_checkpoint() as ckpt_path:
        train(config["args"], on_ray=True, ckpt_path=ckpt_path)


def main_ray(args: argparse.Namespace) -> dict[str, Any]:
    """``--launcher ray``: preprocess on the cluster, run the workers through Ray Train, write ``summary.json``."""
    from lightning_mgpu.launchers import ray_train

    launch = ray_train.RayLaunch(
        num_workers=args.ray_workers,
        storage_path=args.output_dir / "ray",
        address=args.ray_address,
        max_failures=args.max_failures,
        cpus_per_worker=args.ray_cpus_per_worker,
        connect_timeout_s=args.rdzv_timeout,
        use_gpu=args.accelerator == "gpu" or (args.accelerator == "auto" and _cuda_available()),
    )
    start = time.perf_counter()
    if args.ray_address is not None:
        try:  # ray.init would retry an address nobody answers at for many minutes, silently
            ray_train.check_reachable(args.ray_address, launch.connect_timeout_s)
        except ray_train.RayAddressError as err:
            raise SystemExit(f"error: {err}") from None
    with ray_train.ray_cluster(launch):
        if args.preprocess != "none":
            # Build the cache here, once, on this cluster (backend 'ray' reuses it); the workers then only read it.
            build_datamodule(args, args.batch_size).prepare_data()
        result = ray_train.fit_on_ray(ray_worker, {"args": args}, launch)
    wall = time.perf_counter() - start
    m = result.metrics
    last = str(result.checkpoint_path) if result.checkpoint_path is not None else None
    summary = {
        "strategy": args.strategy,
        "launcher": "ray",
        "world_size": args.ray_workers,
        "devices_x_nodes": args.ray_workers,
        "effective_batch_size": args.batch_size * args.ray_workers * args.accumulate_grad_batches,
        "lr": args.lr * args.ray_workers * args.accumulate_grad_batches if args.scale_lr else args.lr,
        "precision": args.precision,
        "val_acc": m.get("val_acc"),
        "val_loss": m.get("val_loss"),
        "train_samples_per_sec": m.get("train_samples_per_sec"),
        "wall_seconds": round(wall, 3),
        "checkpoint_path": last,
        "last_checkpoint_path": last,
        "global_step": int(m["step"]) if "step" in m else None,
        "epochs": int(m["epoch"]) + 1 if "epoch" in m else None,
    }
    write_summary(args, summary)
    return summary


def write_summary(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    args.output_dir.mkdir(parents=True, exist_ok=True)
    # Write-then-rename: a crash mid-write never leaves a truncated summary behind.
    tmp = args.output_dir / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(args.output_dir / "summary.json")
    say(json.dumps(summary, indent=2))


def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> dict[str, Any] | None:
    args = args if args is not None else parse_args(argv)
    if args.launcher == "ray":
        return main_ray(args)
    trainer, facts = train(args)
    if not trainer.is_global_zero:
        return None
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}
    ckpt = trainer.checkpoint_callback
    # Spawn launchers return only the best path to this process; last.ckpt is on disk all the same.
    last = (ckpt.last_model_path if ckpt else "") or str(args.output_dir / "checkpoints" / "last.ckpt")
    last = str(Path(last).resolve()) if Path(last).exists() else None  # absolute, as Lightning's best_model_path
    summary = {
        "strategy": args.strategy,
        "launcher": "lightning",
        "world_size": trainer.world_size,
        "devices_x_nodes": facts["degree"],
        "effective_batch_size": facts["effective_batch"],
        "lr": facts["lr"],
        "precision": facts["precision"],
        "val_acc": metrics.get("val_acc"),
        "val_loss": metrics.get("val_loss"),
        "train_samples_per_sec": metrics.get("train_samples_per_sec"),
        "wall_seconds": round(facts["wall"], 3),
        "checkpoint_path": (ckpt.best_model_path if ckpt else None) or last,
        "last_checkpoint_path": last,
        "global_step": int(metrics.get("global_step", trainer.global_step)),
    }
    write_summary(args, summary)
    return summary


#: What a user's input can be wrong about, found before training: the message names the problem and the fix, and a
#: traceback would only bury it (--debug shows it).
BAD_INPUT = (
    CheckpointReadError,
    CheckpointKeyMismatchError,
    UnsafeCheckpointError,
    CacheError,
    MissingDependencyError,
    PortInUseError,
    UnsupportedTorchError,
)


def run(argv: list[str], args: argparse.Namespace | None = None) -> None:
    """``main``, with bad input reported as ``train.py: error: MESSAGE`` and exit status 2, as argparse does
    (``--debug``: the traceback above the message, and still 2)."""
    try:
        main(argv, args)
    except BAD_INPUT as err:
        if "--debug" in argv:
            import traceback

            traceback.print_exc()
        message = " ".join(str(err).split())  # one line, whatever the exception's own layout
        hint = "" if "--debug" in argv else " (--debug shows the traceback)"
        print(f"train.py: error: {message}{hint}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    run(sys.argv[1:], ARGS)
