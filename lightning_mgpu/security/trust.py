"""What the bundle loads without being told to trust it, and the one check at every load of a file.

A checkpoint is data: every load of a file the bundle did not write in this run (a ``.ckpt``, a sharded folder's
``meta.pt`` and shards, ``--ckpt-path``, ``lightning-mgpu convert``'s source) reads it with torch's ``weights_only``
unpickler and an allow-list, and refuses anything else before it runs. That unpickler is only as safe as the torch
that has it: below torch 2.10 a crafted file can corrupt memory through it (GHSA-63cw-57p8-fm3p), so there every such
load is refused unless the caller says the file is trusted (``trusted=True``; ``--trust-checkpoint`` on the command
lines), which reads it with a full unpickle, as for any file you wrote yourself.
"""

from __future__ import annotations

import os
import pickle

from lightning_mgpu.security import advisories


class UnsafeCheckpointError(pickle.UnpicklingError):
    """The checkpoint was not unpickled (no code ran): it holds an object outside the allow-list, or this torch's safe
    unpickler cannot be trusted with a file from elsewhere."""


def check_untrusted_load(path: str | os.PathLike, trusted: bool) -> None:
    """Refuse to read ``path`` with ``weights_only`` on a torch whose safe unpickler has a known memory-corruption
    advisory, unless the caller trusts the file. Called at every load of a checkpoint file or folder.

    Raises:
        UnsafeCheckpointError: torch is older than the advisory's fix and ``trusted`` is off; nothing was read.
    """
    if trusted:
        return
    advisory = advisories.find(advisories.TORCH_UNPICKLER_ADVISORY, "torch")
    torch_version = advisories.installed_version("torch")
    if advisory.affects(torch_version):
        raise UnsafeCheckpointError(
            f"Refused to load {os.fspath(path)}: torch {torch_version}'s weights_only unpickler can corrupt memory on"
            f" a crafted file ({advisory.id}). Upgrade torch to {advisory.fixed} or newer, or, only for a file you"
            " wrote yourself, pass trusted=True (--trust-checkpoint on the command line). Nothing was read."
        )
