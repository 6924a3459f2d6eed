"""``lightning-mgpu convert SRC OUT``: a sharded checkpoint folder, one Lightning ``.ckpt`` and ``.safetensors``.

Commands::

    lightning-mgpu convert outputs/checkpoints/last.ckpt last-full.ckpt        # sharded folder -> one .ckpt file
    lightning-mgpu convert outputs/checkpoints/last.ckpt model.safetensors     # folder or file -> the weights alone
    lightning-mgpu convert epoch03.ckpt epoch03-sharded --to sharded           # one file -> a sharded folder

One process, no GPU and no process group. A folder converts to the file a full save would have written (the same
keys, the ordinary optimizer state), so ``ddp``, ``dp``, ``horovod`` or a plain module load it; a file becomes a
folder that ``sharded_fsdp2`` loads on any number of ranks. A file is read memory-mapped, so converting it to a folder
holds little more than the tensor being written. ``OUT`` must not exist: nothing you have is overwritten.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any, Literal

import torch

from lightning_mgpu.checkpoint.io import extract_state_dict, load_checkpoint_file, read_checkpoint
from lightning_mgpu.checkpoint.sharded import (
    is_sharded_checkpoint,
    temporary_folder,
    write_sharded_checkpoint,
)
from lightning_mgpu.utilities import files
from lightning_mgpu.utilities.imports import require

Target = Literal["ckpt", "sharded", "safetensors"]


class ConvertError(ValueError):
    """The conversion cannot start: a missing source, an existing output, or a target the source cannot become."""


def target_of(src: Path, out: Path, to: str = "auto") -> Target:
    """What ``OUT`` becomes: ``--to``, else ``.safetensors`` by its suffix, else the other format than ``SRC``'s."""
    if to != "auto":
        return to  # type: ignore[return-value]
    if out.suffix == ".safetensors":
        return "safetensors"
    return "ckpt" if is_sharded_checkpoint(src) else "sharded"


def convert(src: str | Path, out: str | Path, to: str = "auto", trusted: bool = False) -> str:
    """Convert ``src`` into ``out`` and return a one-line summary.

    Args:
        src: a sharded checkpoint folder or a checkpoint file.
        out: the path to create; it must not exist.
        to: ``"ckpt"``, ``"sharded"``, ``"safetensors"`` or ``"auto"`` (see :func:`target_of`).
        trusted: read a file with a full unpickle (only for files you wrote yourself).

    Raises:
        ConvertError: ``src`` is missing, ``out`` exists, or the target is the source's own format.
        CheckpointReadError, UnsafeCheckpointError: ``src`` cannot be read safely.

    Example::

        convert("outputs/checkpoints/last.ckpt", "last-full.ckpt")
    """
    src, out = Path(src), Path(out)
    sharded_src = is_sharded_checkpoint(src)
    if not src.exists():
        raise ConvertError(f"{src} does not exist: pass a checkpoint file or a sharded checkpoint folder.")
    if src.is_dir() and not sharded_src:
        raise ConvertError(
            f"{src} is a folder but not a sharded checkpoint folder (it holds no .metadata and meta.pt)."
        )
    if not (src.is_file() or sharded_src):
        raise ConvertError(f"{src} is neither a checkpoint file nor a sharded checkpoint folder.")
    if out.exists() or out.is_symlink():
        raise ConvertError(f"{out} already exists; choose another output path (convert never overwrites).")
    target = target_of(src, out, to)
    if (target == "sharded") == sharded_src and target != "safetensors":
        raise ConvertError(
            f"{src} is already {'a sharded folder' if sharded_src else 'one file'}; pass --to with the other format."
        )
    if target == "safetensors":
        safetensors_torch = require("safetensors.torch", "lightning-mgpu convert ... OUT.safetensors")
        weights = _weights(
            read_checkpoint(src, trusted=trusted)
            if sharded_src
            else load_checkpoint_file(src, trusted=trusted, mmap=True)
        )
        payload = safetensors_torch.save(weights, metadata={"format": "pt"})

        def write(f: Any) -> None:
            f.write(payload)

        files.atomic_write(out, write)
        return f"{src} -> {out}: {len(weights)} tensors of the model's weights (safetensors)"
    if target == "ckpt":
        checkpoint = read_checkpoint(src, trusted=trusted)
        files.atomic_write(out, lambda f: torch.save(checkpoint, f))
        return f"{src} -> {out}: one checkpoint file ({_summary(checkpoint)})"
    checkpoint = load_checkpoint_file(src, trusted=trusted, mmap=True)
    with warnings.catch_warnings():
        # DCP notes that it saves in one process: convert asks for exactly that (no_dist), so the note is noise.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        write_sharded_checkpoint(checkpoint, out, temporary_folder(out), coordinator=True, no_dist=True)
    return f"{src} -> {out}: a sharded checkpoint folder ({_summary(checkpoint)})"


def _weights(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The model's tensors, each with storage of its own (safetensors refuses shared storage, e.g. tied weights)."""
    weights: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for key, value in extract_state_dict(checkpoint).items():
        if not isinstance(value, torch.Tensor):
            continue
        tensor = value.detach().cpu().contiguous()
        where = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        weights[key] = tensor.clone() if where in seen else tensor
        seen.add(where)
    return weights


def _summary(checkpoint: dict[str, Any]) -> str:
    if "state_dict" not in checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return f"{len(checkpoint)} tensors of a plain state_dict (no optimizer state)"
    params = len(checkpoint.get("state_dict", {}))
    optimizers = len(checkpoint.get("optimizer_states", []))
    step = checkpoint.get("global_step")
    return f"{params} model tensors, {optimizers} optimizer state(s)" + (
        f", global step {step}" if step is not None else ""
    )


def main(args: argparse.Namespace) -> int:
    """The ``convert`` command: 0 on success, 2 with a one-line error on bad input."""
    import sys

    from lightning_mgpu.checkpoint.io import CheckpointReadError, UnsafeCheckpointError
    from lightning_mgpu.utilities.imports import MissingDependencyError

    try:
        message = convert(args.src, args.out, args.to, trusted=args.trusted)
    except (ConvertError, CheckpointReadError, UnsafeCheckpointError, MissingDependencyError) as err:
        sys.stderr.write(f"lightning-mgpu convert: error: {err}\n")
        return 2
    sys.stderr.write(message + "\n")
    return 0
