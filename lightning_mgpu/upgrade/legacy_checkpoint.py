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

``ModelCheckpoint(prefix=P)`` (1.0-1.2) beside such a path becomes ``legacy_checkpoint_filepath(path, prefix=P)``
(rule ``checkpoint-prefix-moved``): 1.x formatted the name and then put ``P-`` in front, so the name pattern here
starts with ``P-`` (the default pattern written out where the path is a folder).
"""

from __future__ import annotations

import os
from typing import Any

from fsspec.core import url_to_fs

#: 1.x's ModelCheckpoint.CHECKPOINT_JOIN_CHAR, between the prefix and the name.
_JOIN = "-"
#: The default name pattern of 1.1-1.2 and 2.x (1.0's was "{epoch}": ``default_filename`` asks for it).
_DEFAULT_PATTERN = "{epoch}-{step}"


def _is_local(fs: Any) -> bool:
    """Whether an fsspec file system is the local one (1.x compared ``protocol == "file"``; fsspec now gives a
    tuple of names)."""
    protocol = fs.protocol
    return "file" in (protocol if isinstance(protocol, (tuple, list)) else (protocol,))


def legacy_checkpoint_filepath(
    filepath: str | os.PathLike[str] | None, default_filename: str | None = None, prefix: str | None = None
) -> dict[str, Any]:
    """The ``dirpath=`` and ``filename=`` that Lightning 1.x's ``ModelCheckpoint(filepath=...)`` set (module docstring).

    Args:
        filepath: what the 1.x script passed as ``filepath`` (a folder, a folder and a name pattern, a file, a
            remote URL; None or empty for none).
        default_filename: the name pattern for an existing folder: None for 1.1's and 2.x's default
            (``"{epoch}-{step}"``), ``"{epoch}"`` for 0.10-1.0's.
        prefix: what the script passed as ``ModelCheckpoint(prefix=...)`` beside the path (1.0-1.2), or None. 1.x
            formatted the name pattern and then put a non-empty prefix in front, joined by ``-``
            (``CHECKPOINT_JOIN_CHAR``), the prefix itself never formatted; 2.x has no prefix, so it goes at the start
            of ``filename`` (with the default pattern written out where the name had none).

    Returns:
        Keyword arguments for 2.x's ``ModelCheckpoint``: ``{"dirpath": path, "filename": default_filename}`` for an
        existing folder, ``{"dirpath": folder, "filename": last_part}`` for any other path, ``{}`` for none; with a
        prefix, ``filename`` is ``"<prefix>-<pattern>"`` (and ``{"filename": ...}`` alone for no path).

    Raises:
        ValueError: a prefix with ``{`` or ``}``: 2.x formats the whole ``filename``, so no pattern writes 1.x's
            literal braces (the prefix must change, or the name be built another way).
    """
    if prefix and ("{" in prefix or "}" in prefix):
        raise ValueError(
            f"ModelCheckpoint(prefix={prefix!r}): 1.x put the prefix in front of the formatted name as written;"
            " 2.x formats the whole filename, so a prefix with braces cannot be kept: choose the name yourself"
        )
    if not filepath:  # 1.x: "will be determined by trainer at runtime", as without filepath
        return _prefixed({}, default_filename, prefix)
    path = os.fspath(filepath)
    fs, _ = url_to_fs(path)
    if fs.isdir(path):  # an existing folder, checked when the callback is built, as 1.x did
        return _prefixed({"dirpath": path, "filename": default_filename}, default_filename, prefix)
    if _is_local(fs):  # 1.x did not normalise remote paths
        path = os.path.realpath(path)
    dirpath, filename = os.path.split(path)
    return _prefixed({"dirpath": dirpath, "filename": filename}, default_filename, prefix)


def _prefixed(kwargs: dict[str, Any], default_filename: str | None, prefix: str | None) -> dict[str, Any]:
    """``kwargs`` with a non-empty ``prefix`` put in front of the name pattern, as 1.0-1.2 joined it: ``"P-" +`` the
    pattern, or the release's default pattern where there was none (1.x filled in the default before joining; an
    empty prefix joined nothing, in 1.0 through its ``if txt`` filter and in 1.1-1.2 through ``if prefix``)."""
    if not prefix:
        return kwargs
    pattern = kwargs.get("filename") or default_filename or _DEFAULT_PATTERN
    return {**kwargs, "filename": f"{prefix}{_JOIN}{pattern}"}
