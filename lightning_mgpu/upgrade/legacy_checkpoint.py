"""Lightning 1.x's ``ModelCheckpoint(filepath=...)``, for converted scripts: where checkpoints go, as 1.x read it.

Lightning up to 1.1 took one ``filepath`` (1.2 removed it); 2.x takes ``dirpath`` (the folder) and ``filename`` (the
name pattern). 1.x split the path when the callback was built, by what was on disk then (``__init_ckpt_dir``, the
same in every release from 0.10.0 to 1.1.8):

- a path that is an existing folder: the checkpoints go into it, named by the default pattern;
- any other path (a pattern ``"ckpts/{epoch}-{val_loss:.2f}"``, a file ``"out/best.ckpt"``, a folder not made yet):
  ``os.path.split`` of its real path (``os.path.realpath``, on a local file system only): the folder is the part
  before the last ``/`` (the working directory where there is none), and the name pattern is the last part, kept as
  it is (1.x added ``.ckpt`` behind it, so ``"best.ckpt"`` wrote ``best.ckpt.ckpt``, and so does 2.x);
- an empty path or None: as if none was given.

``lightning-mgpu upgrade`` writes ``ModelCheckpoint(**legacy_checkpoint_filepath(path), ...)`` where the path is a
value it cannot read, or a literal that may name a folder (rule ``checkpoint-filepath``): which of the cases above
it is, only the run can tell. The checkpoints then go where 1.x put them, under the same names, except in one case
that depends on the release: a folder without a name pattern got the default pattern, ``"{epoch}"`` in 0.10-1.0
(``epoch=3.ckpt``) and ``"{epoch}-{step}"`` in 1.1 and 2.x (``epoch=3-step=1200.ckpt``); this gives 1.1's unless
``default_filename="{epoch}"`` asks for 1.0's (rule ``checkpoint-filepath-folder`` notes it).
"""

from __future__ import annotations

import os
from typing import Any

from fsspec.core import url_to_fs


def _is_local(fs: Any) -> bool:
    """Whether an fsspec file system is the local one (1.x compared ``protocol == "file"``; fsspec now gives a
    tuple of names)."""
    protocol = fs.protocol
    return "file" in (protocol if isinstance(protocol, (tuple, list)) else (protocol,))


def legacy_checkpoint_filepath(
    filepath: str | os.PathLike[str] | None, default_filename: str | None = None
) -> dict[str, Any]:
    """The ``dirpath=`` and ``filename=`` that Lightning 1.x's ``ModelCheckpoint(filepath=...)`` set (module docstring).

    Args:
        filepath: what the 1.x script passed as ``filepath`` (a folder, a folder and a name pattern, a file, a
            remote URL; None or empty for none).
        default_filename: the name pattern for an existing folder: None for 1.1's and 2.x's default
            (``"{epoch}-{step}"``), ``"{epoch}"`` for 0.10-1.0's.

    Returns:
        Keyword arguments for 2.x's ``ModelCheckpoint``: ``{"dirpath": path, "filename": default_filename}`` for an
        existing folder, ``{"dirpath": folder, "filename": last_part}`` for any other path, ``{}`` for none.
    """
    if not filepath:  # 1.x: "will be determined by trainer at runtime", as without filepath
        return {}
    path = os.fspath(filepath)
    fs, _ = url_to_fs(path)
    if fs.isdir(path):  # an existing folder, checked when the callback is built, as 1.x did
        return {"dirpath": path, "filename": default_filename}
    if _is_local(fs):  # 1.x did not normalise remote paths
        path = os.path.realpath(path)
    dirpath, filename = os.path.split(path)
    return {"dirpath": dirpath, "filename": filename}
