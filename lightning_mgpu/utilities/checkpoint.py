"""Loading checkpoints into plain modules, whatever strategy wrote them.

The classic DDP/DP pitfall is a state dict whose keys start with ``module.`` (saved from the
wrapper instead of the module), which then fails to load into the plain model. The bundle's
strategies always save plain keys; :func:`load_state_dict` also repairs checkpoints written
elsewhere.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

_WRAPPER_PREFIX = "module."
_MAX_LISTED_KEYS = 20


class CheckpointKeyMismatchError(RuntimeError):
    """The checkpoint's keys do not match the model's."""


def strip_prefix(state_dict: Mapping[str, Any], prefix: str = _WRAPPER_PREFIX) -> dict[str, Any]:
    """Remove every leading ``prefix`` (repeatedly, for nested wrappers) from the keys."""
    out: dict[str, Any] = {}
    for key, value in state_dict.items():
        while key.startswith(prefix):
            key = key[len(prefix) :]
        out[key] = value
    return out


def _read(path_or_state_dict: str | os.PathLike | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(path_or_state_dict, Mapping):
        return path_or_state_dict
    path = Path(path_or_state_dict)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint {str(path)!r} does not exist or is not a file.")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # Lightning checkpoints can carry hyper-parameters as arbitrary Python objects, which
        # the safe loader refuses. Only do this for files you trust, as with Lightning itself.
        return torch.load(path, map_location="cpu", weights_only=False)


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


def _format_keys(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_LISTED_KEYS])
    more = len(keys) - _MAX_LISTED_KEYS
    return shown + (f", ... ({more} more)" if more > 0 else "")


def load_state_dict(
    model: nn.Module,
    path_or_state_dict: str | os.PathLike | Mapping[str, Any],
    strict: bool = True,
    map_location: str | torch.device | None = None,
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

    Returns:
        The model, for chaining.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: no weights could be found in the checkpoint.
        CheckpointKeyMismatchError: with ``strict=True``, keys are missing or unexpected; the
            message lists both.

    Example::

        model = ImageClassifier()
        load_state_dict(model, "outputs/checkpoints/last.ckpt")
    """
    state_dict = extract_state_dict(_read(path_or_state_dict))
    model_keys = set(model.state_dict())
    state_dict = _align_keys(state_dict, model_keys)
    if map_location is None:
        first = next(iter(model.parameters()), None)
        if first is None:
            first = next(iter(model.buffers()), None)
        map_location = first.device if first is not None else torch.device("cpu")
    state_dict = {k: v.to(map_location) if isinstance(v, torch.Tensor) else v for k, v in state_dict.items()}
    missing = sorted(model_keys - set(state_dict))
    unexpected = sorted(set(state_dict) - model_keys)
    if strict and (missing or unexpected):
        raise CheckpointKeyMismatchError(
            f"The checkpoint does not match {type(model).__name__}: {len(missing)} missing key(s)"
            f" [{_format_keys(missing)}] and {len(unexpected)} unexpected key(s) [{_format_keys(unexpected)}]."
            " Check that the checkpoint was saved from the same architecture, or pass strict=False to load"
            " the keys that match."
        )
    model.load_state_dict(state_dict, strict=strict)
    return model
