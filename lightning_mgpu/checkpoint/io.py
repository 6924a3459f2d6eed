"""Checkpoint I/O for every strategy: safe loading, atomic saving, and loading into plain modules.

- **Untrusted files.** Every load here uses ``torch.load(weights_only=True)``: a checkpoint is data, and
  unpickling arbitrary objects runs code. The few non-tensor types Lightning checkpoints carry are named in
  :data:`SAFE_GLOBALS`. There is no silent fallback: ``trusted=True`` allows a full unpickle, with a warning. On a
  torch whose ``weights_only`` unpickler is itself unsafe, every load is refused unless ``trusted=True``
  (:func:`lightning_mgpu.security.trust.check_untrusted_load`).
- **Atomic saves.** :class:`AtomicCheckpointIO` streams the checkpoint to a temporary file in the target
  folder, fsyncs it, renames it over the target and fsyncs the folder, so a kill at any moment leaves either
  the previous checkpoint or the new one under the name, never a torn file. A full disk or an unwritable
  folder raises :class:`CheckpointSaveError` naming the path; the previous checkpoint stays whole.
- **``module.`` keys.** The classic DDP/DP pitfall is a state dict whose keys start with ``module.`` (saved
  from the wrapper); :func:`load_state_dict` strips or adds the prefix and lists mismatched keys.
"""

from __future__ import annotations

import errno
import os
import pickle
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from torch import nn
from typing_extensions import override

from lightning_mgpu.checkpoint.sharded import (
    META_FILENAME,
    is_sharded_checkpoint,
    read_sharded_tensors,
    sharded_model_keys,
)
from lightning_mgpu.security.trust import UnsafeCheckpointError, check_untrusted_load
from lightning_mgpu.utilities import files

_WRAPPER_PREFIX = "module."
_MAX_LISTED_KEYS = 20


def _safe_globals() -> list[Any]:
    """Types a Lightning checkpoint may carry besides tensors and builtins: hyper-parameter containers."""
    import argparse
    import pathlib

    from lightning.fabric.utilities.data import AttributeDict

    return [
        AttributeDict,
        argparse.Namespace,
        pathlib.PosixPath,
        pathlib.PurePosixPath,
        torch.torch_version.TorchVersion,
    ]


#: The allow-list for ``weights_only`` loads, beyond what torch allows itself.
SAFE_GLOBALS: list[Any] = _safe_globals()


class CheckpointKeyMismatchError(RuntimeError):
    """The checkpoint's keys do not match the model's."""


class CheckpointReadError(RuntimeError):
    """The checkpoint is missing, truncated, or not a torch checkpoint."""


class CheckpointSaveError(OSError):
    """A checkpoint could not be written (full disk, unwritable folder); the previous one is intact."""


def _check_checkpoint_bytes(path: Path) -> None:
    """Refuse, in the bundle's words, a file that cannot be a torch checkpoint (before torch quotes its own advice)."""
    problem = files.checkpoint_path_problem(path)
    if problem is not None:
        raise CheckpointReadError(f"Checkpoint {problem}")


def load_checkpoint_file(
    path: str | os.PathLike, map_location: Any = "cpu", trusted: bool = False, mmap: bool = False
) -> Any:
    """Read a checkpoint file safely: ``weights_only=True`` with :data:`SAFE_GLOBALS` allowed.

    Args:
        path: the file.
        map_location: as for ``torch.load``; the CPU by default, so a file saved on GPU 0 never lands there.
        trusted: unpickle everything (``weights_only=False``). Only for files you made yourself: unpickling
            can run arbitrary code. A warning says so.
        mmap: map the file instead of reading it (cheap for a check of a large checkpoint's keys).

    Raises:
        CheckpointReadError: the file is missing, truncated or not a torch checkpoint.
        UnsafeCheckpointError: the file holds a type outside the allow-list, or torch's safe unpickler has a known
            advisory and ``trusted`` is off (nothing was executed).
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointReadError(
            f"Checkpoint {str(path)!r} is a folder, not a sharded checkpoint (no .metadata and {META_FILENAME} in it):"
            " a save into it was cut short, or it is not a checkpoint. Use an earlier checkpoint."
        )
    if not path.is_file():
        raise CheckpointReadError(f"Checkpoint {str(path)!r} does not exist or is not a file.")
    _check_checkpoint_bytes(path)
    check_untrusted_load(path, trusted)
    if trusted:
        warnings.warn(
            f"Loading {path} with trusted=True: unpickling can run arbitrary code. Only do this for checkpoints"
            " you wrote yourself.",
            UserWarning,
            stacklevel=2,
        )
        return torch.load(path, map_location=map_location, weights_only=False, mmap=mmap)
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise UnsafeCheckpointError(
            f"Refused to load {path}: it holds an object that is not plain data ({_refused_global(err)}), and"
            " unpickling it could run code. Nothing was executed. If you made this file yourself, load it with"
            " `trusted=True`, or allow the type with `torch.serialization.add_safe_globals([...])`."
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as err:
        raise CheckpointReadError(
            f"Checkpoint {path} cannot be read ({_first_line(err)}): it is truncated or not a torch checkpoint,"
            " e.g. cut short by a kill or a full disk during a save. Use an earlier checkpoint (last.ckpt is only"
            " ever replaced by a complete one when saved with lightning_mgpu's AtomicCheckpointIO)."
        ) from None


def _refused_global(err: BaseException) -> str:
    import re

    found = re.search(r"(?:Unsupported global|GLOBAL)[: ]+(?:GLOBAL )?([\w.]+)", str(err))
    return f"refused type: {found.group(1)}" if found else _first_line(err)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


class _RecordingFile:
    """A file wrapper that remembers the OS error of a failed write: torch.save reports a full disk only as
    "unexpected pos ...", so the errno must be caught where the write happens."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as err:
            self.error = err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None]) -> None:
    """Write ``path`` atomically: ``write(file)`` into a temporary file beside it, fsync, rename, fsync the folder.

    Raises:
        CheckpointSaveError: the disk is full or the folder is not writable; ``path`` is unchanged.
    """
    path = Path(path)
    recorder: _RecordingFile | None = None

    def recording_write(f: Any) -> None:
        nonlocal recorder
        recorder = _RecordingFile(f)
        write(recorder)

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(path, recording_write)
    except CheckpointSaveError:
        raise
    except (OSError, RuntimeError) as err:
        cause = recorder.error if recorder is not None and recorder.error is not None else err
        raise _save_error(path, cause) from err


def _save_error(path: Path, err: BaseException) -> CheckpointSaveError:
    error = CheckpointSaveError(_save_message(path, err))
    error.errno = getattr(err, "errno", None) or errno.EIO
    return error


def _save_message(path: Path, err: BaseException) -> str:
    reason = getattr(err, "strerror", None) or _first_line(err)
    fixes = {
        errno.ENOSPC: "free space on that disk or choose another --output-dir / dirpath",
        errno.EDQUOT: "free space in your quota or choose another --output-dir / dirpath",
        errno.EACCES: "make the folder writable or choose another --output-dir / dirpath",
        errno.EROFS: "the filesystem is read-only: choose another --output-dir / dirpath",
        errno.EPERM: "make the folder writable or choose another --output-dir / dirpath",
    }
    fix = fixes.get(getattr(err, "errno", None) or 0, "check the folder and the disk")
    previous = " The previous checkpoint at that path is intact." if path.exists() else ""
    return f"Could not save the checkpoint {path}: {reason}. {fix[0].upper() + fix[1:]}.{previous}"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning ``CheckpointIO`` that saves atomically (see :func:`atomic_write`) and loads safely.

    Every bundle strategy uses it unless given another ``checkpoint_io``; use it with Lightning's own
    strategies through ``Trainer(plugins=[AtomicCheckpointIO()])``.

    Args:
        trusted: read every checkpoint with a full unpickle, as ``fit(..., weights_only=False)`` asks for one load.
            Only for checkpoints you wrote yourself; it is also what lets a torch older than 2.10 resume at all (see
            :func:`lightning_mgpu.security.trust.check_untrusted_load`).

    Raises:
        CheckpointSaveError: on save, a full disk or an unwritable folder (the previous checkpoint is intact).
        CheckpointReadError, UnsafeCheckpointError: on load, see :func:`load_checkpoint_file`.

    Example::

        trainer = Trainer(strategy="ddp", plugins=[AtomicCheckpointIO()])
    """

    def __init__(self, trusted: bool = False) -> None:
        super().__init__()
        self.trusted = trusted

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"AtomicCheckpointIO.save_checkpoint does not take storage_options, got {storage_options!r}."
            )
        atomic_write(path, lambda f: torch.save(checkpoint, f))

    @override
    def load_checkpoint(
        self, path: Any, map_location: Any = lambda storage, loc: storage, weights_only: bool | None = None
    ) -> dict[str, Any]:
        # weights_only=False is how Lightning asks for a full unpickle; honour it only as an explicit choice.
        return read_checkpoint(path, map_location=map_location, trusted=self.trusted or weights_only is False)


def read_checkpoint(path: str | os.PathLike, map_location: Any = "cpu", trusted: bool = False) -> dict[str, Any]:
    """A whole Lightning checkpoint from a file or from a sharded folder (its shards joined, on the CPU).

    A folder written by ``ShardedStrategy(checkpoint_format="sharded")`` reads back as the dict a full save would
    have written, so ``ddp``, ``dp``, ``horovod`` or a plain module resume from it unchanged.

    Raises:
        CheckpointReadError, UnsafeCheckpointError: see :func:`load_checkpoint_file`.

    Example::

        ckpt = read_checkpoint("outputs/checkpoints/last.ckpt")  # a file or a folder
        model.load_state_dict(ckpt["state_dict"])
    """
    path = Path(path)
    if not is_sharded_checkpoint(path):
        return load_checkpoint_file(path, map_location=map_location, trusted=trusted)
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, wrapping the rank's error

    checkpoint = load_checkpoint_file(path / META_FILENAME, map_location=map_location, trusted=trusted)
    try:
        checkpoint.update(read_sharded_tensors(path))
    except (RuntimeError, OSError, ValueError, EOFError, CheckpointException) as err:
        refused = _unpickling_failure(err)
        if refused is not None:
            raise UnsafeCheckpointError(
                f"Refused to load {path}: an entry of its shards is not plain data ({_refused_global(refused)}), and"
                " unpickling it could run code. Nothing was executed. Use a folder you or your jobs wrote."
            ) from None
        raise CheckpointReadError(
            f"Sharded checkpoint {path} cannot be read ({_first_line(err)}): a shard is missing or cut short."
        ) from None
    return checkpoint


def _unpickling_failure(err: BaseException) -> BaseException | None:
    """The refusal of the weights_only unpickler inside a DCP error (which wraps each rank's exception), if any."""
    wrapped = [v[0] if isinstance(v, tuple) else v for v in getattr(err, "failures", {}).values()]
    return next((e for e in [err, *wrapped] if isinstance(e, pickle.UnpicklingError)), None)


def strip_prefix(state_dict: Mapping[str, Any], prefix: str = _WRAPPER_PREFIX) -> dict[str, Any]:
    """Remove every leading ``prefix`` (repeatedly, for nested wrappers) from the keys."""
    out: dict[str, Any] = {}
    for key, value in state_dict.items():
        while key.startswith(prefix):
            key = key[len(prefix) :]
        out[key] = value
    return out


def _read(path_or_state_dict: str | os.PathLike | Mapping[str, Any], trusted: bool = False) -> Mapping[str, Any]:
    if isinstance(path_or_state_dict, Mapping):
        return path_or_state_dict
    path = Path(path_or_state_dict)
    if not path.is_file() and not is_sharded_checkpoint(path):
        raise FileNotFoundError(f"Checkpoint {str(path)!r} does not exist or is not a file or a sharded folder.")
    return read_checkpoint(path, map_location="cpu", trusted=trusted)


def extract_state_dict(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """Return the model weights from a Lightning checkpoint or a raw state dict."""
    if "state_dict" in checkpoint and isinstance(checkpoint["state_dict"], Mapping):
        return dict(checkpoint["state_dict"])
    for key in ("model_state_dict", "model"):
        if key in checkpoint and isinstance(checkpoint[key], Mapping):
            return dict(checkpoint[key])
    if checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return dict(checkpoint)
    raise ValueError(
        "Could not find model weights in the checkpoint: expected a Lightning checkpoint (with a 'state_dict'"
        f" entry) or a raw state dict of tensors; found top-level keys {sorted(checkpoint)[:_MAX_LISTED_KEYS]}."
    )


def _align_keys(state_dict: dict[str, Any], model_keys: set[str]) -> dict[str, Any]:
    """Strip or add ``module.`` prefixes so the keys best match the model's."""
    plain = strip_prefix(state_dict)
    depth = 0
    # A wrapped model (DataParallel/DDP around the module) expects one or more prefixes.
    sample = next(iter(model_keys), "")
    while sample.startswith(_WRAPPER_PREFIX * (depth + 1)):
        depth += 1
    candidates = [state_dict, plain]
    if depth:
        candidates.append({_WRAPPER_PREFIX * depth + k: v for k, v in plain.items()})
    return max(candidates, key=lambda sd: len(model_keys & set(sd)))


def _key_mismatch(model_keys: set[str], state_dict: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(missing, unexpected)`` keys of ``state_dict`` against the model's, sorted."""
    return sorted(model_keys - set(state_dict)), sorted(set(state_dict) - model_keys)


def _format_keys(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_LISTED_KEYS])
    more = len(keys) - _MAX_LISTED_KEYS
    return shown + (f", ... ({more} more)" if more > 0 else "")


def load_state_dict(
    model: nn.Module,
    path_or_state_dict: str | os.PathLike | Mapping[str, Any],
    strict: bool = True,
    map_location: str | torch.device | None = None,
    trusted: bool = False,
) -> nn.Module:
    """Load weights from any bundle or Lightning checkpoint into a plain ``nn.Module``.

    Args:
        model: the module to load into; it may itself be wrapped (``DataParallel``, ``DDP``).
        path_or_state_dict: a checkpoint path (Lightning ``.ckpt`` or a ``torch.save``-d state
            dict) or an already loaded dict.
        strict: as in ``nn.Module.load_state_dict``; if ``False`` missing/unexpected keys are allowed.
        map_location: where to put the tensors; defaults to the model's device (the CPU for a
            model without parameters). The file itself is always read onto the CPU first, so a
            checkpoint saved on GPU 0 never lands on GPU 0 of a different process.
        trusted: unpickle arbitrary objects (``weights_only=False``), with a warning. Off: a checkpoint is
            read as data only, and one that holds anything else is refused before any of it runs.

    Returns:
        The model, for chaining.

    Raises:
        FileNotFoundError: the path does not exist.
        CheckpointReadError: the file is truncated or not a torch checkpoint.
        UnsafeCheckpointError: the file holds non-data objects and ``trusted`` is off (nothing was executed).
        ValueError: no weights could be found in the checkpoint.
        CheckpointKeyMismatchError: with ``strict=True``, keys are missing or unexpected; the
            message lists both.

    Example::

        model = ImageClassifier()
        load_state_dict(model, "outputs/checkpoints/last.ckpt")
    """
    state_dict = extract_state_dict(_read(path_or_state_dict, trusted=trusted))
    model_keys = set(model.state_dict())
    state_dict = _align_keys(state_dict, model_keys)
    if map_location is None:
        first: torch.Tensor | None = next(iter(model.parameters()), None)
        if first is None:
            first = next(iter(model.buffers()), None)
        map_location = first.device if first is not None else torch.device("cpu")
    state_dict = {k: v.to(map_location) if isinstance(v, torch.Tensor) else v for k, v in state_dict.items()}
    missing, unexpected = _key_mismatch(model_keys, state_dict)
    if strict and (missing or unexpected):
        raise CheckpointKeyMismatchError(
            f"The checkpoint does not match {type(model).__name__}: {len(missing)} missing key(s)"
            f" [{_format_keys(missing)}] and {len(unexpected)} unexpected key(s) [{_format_keys(unexpected)}]."
            " Check that the checkpoint was saved from the same architecture, or pass strict=False to load"
            " the keys that match."
        )
    model.load_state_dict(state_dict, strict=strict)
    return model


def check_checkpoint_matches(model: nn.Module, path: str | os.PathLike, trusted: bool = False) -> None:
    """Refuse, before any training starts, a checkpoint that cannot be resumed into ``model``.

    Reads the file the safe way (memory-mapped, so a large checkpoint costs little), or a sharded folder's metadata,
    and compares its model keys with ``model``'s, ``module.`` prefixes aside. The checkpoint is never modified.

    Raises:
        CheckpointReadError: missing, truncated or not a torch checkpoint.
        UnsafeCheckpointError: holds non-data objects (nothing was executed).
        CheckpointKeyMismatchError: from another model; missing and unexpected keys are listed.

    Example::

        check_checkpoint_matches(model, args.ckpt_path)  # then trainer.fit(model, ckpt_path=args.ckpt_path)
    """
    path = Path(path)
    if is_sharded_checkpoint(path):  # the keys from the folder's metadata: no shard is read
        check_untrusted_load(path, trusted)
        state_dict: Mapping[str, Any] = dict.fromkeys(sharded_model_keys(path))
    else:
        state_dict = extract_state_dict(load_checkpoint_file(path, trusted=trusted, mmap=True))
    model_keys = set(model.state_dict())
    missing, unexpected = _key_mismatch(model_keys, _align_keys(dict(state_dict), model_keys))
    if missing or unexpected:
        raise CheckpointKeyMismatchError(
            f"--ckpt-path {path} was not written by this model ({type(model).__name__}): {len(missing)} missing key(s)"
            f" [{_format_keys(missing)}] and {len(unexpected)} unexpected key(s) [{_format_keys(unexpected)}]. The file"
            " was left untouched. Pass a checkpoint of the same model and options, or start without --ckpt-path."
        )
