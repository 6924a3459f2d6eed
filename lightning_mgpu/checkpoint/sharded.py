"""Sharded checkpoints: a folder that every rank writes its own shards into, landed atomically.

A sharded checkpoint is the Lightning checkpoint dict split in two, in a folder named like the file it replaces
(``last.ckpt/``, as Lightning's ``FSDPStrategy`` names its folders)::

    last.ckpt/
        .metadata, __R_K.distcp  torch.distributed.checkpoint: "state_dict" and "optimizer_states", each rank its shards
        meta.pt                  the rest (loops, callbacks, RNG states, hyper-parameters), written by rank 0

The tensor part keeps the layout of a full ``.ckpt`` key for key (model keys, torch's ordinary optimizer format with
integer ids), so a folder converts to a file and back without the model: :func:`read_sharded_tensors` returns what a
full save would have written. torch.distributed.checkpoint reshards on load: a folder saved by N ranks loads on M.

**Read as data.** torch.distributed.checkpoint's own reader unpickles ``.metadata`` with Python's ``pickle`` and the
non-tensor entries with ``torch.load(weights_only=False)``: either can run code that a crafted folder names. Every read
here goes through :func:`folder_reader` and :func:`load_planner` instead, which unpickle ``.metadata`` against an
allow-list of DCP's own metadata types and the other entries with ``weights_only=True``; anything else is refused.

**Atomic.** Every rank writes into a temporary folder beside the target; once the last shard and ``.metadata`` are
written (``dcp.save`` returns on the coordinator only then), rank 0 writes ``meta.pt`` and swaps the folder into place
with one ``renameat2(RENAME_EXCHANGE)``. A kill at any moment leaves the previous checkpoint or the new one under the
name, never a torn folder; a killed save's temporary folder is removed by the next save.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import io
import os
import pickle
import shutil
import uuid
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
from typing_extensions import override

from lightning_mgpu.security.trust import UnsafeCheckpointError
from lightning_mgpu.utilities._compat import dcp_save
from lightning_mgpu.utilities.files import fsync_dir

#: rank 0's part, beside the shards (the name Lightning's FSDPStrategy uses for the same thing)
META_FILENAME = "meta.pt"
#: the checkpoint keys whose tensors are sharded; everything else goes to ``meta.pt``
SHARDED_KEYS = ("state_dict", "optimizer_states")
_TMP_SUFFIX = ".tmp-dir"


def is_sharded_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a complete sharded checkpoint folder (DCP's ``.metadata`` and rank 0's ``meta.pt``)."""
    path = Path(path)
    return path.is_dir() and (path / ".metadata").is_file() and (path / META_FILENAME).is_file()


def temporary_folder(path: str | os.PathLike) -> Path:
    """A fresh ``.NAME.UUID.tmp-dir`` beside ``path`` (same filesystem, so the final swap is atomic). Rank 0 picks
    it and broadcasts it: every rank must write into the same folder."""
    path = Path(path)
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}{_TMP_SUFFIX}")


def remove_stale_folders(path: str | os.PathLike, keep: Path | None = None) -> None:
    """Remove the temporary folders of ``path`` that killed saves left behind (and the old content of a swap)."""
    path = Path(path)
    for tmp in path.parent.glob(f".{path.name}.*{_TMP_SUFFIX}"):
        if tmp != keep:
            shutil.rmtree(tmp, ignore_errors=True)


def split_checkpoint(checkpoint: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, meta)``: the sharded part and the rest. Optimizer state ids become strings, because
    torch.distributed.checkpoint reads an integer path component back as a list index."""
    tensors: dict[str, Any] = {}
    for key in SHARDED_KEYS:
        if key in checkpoint:
            tensors[key] = checkpoint[key]
    if "optimizer_states" in tensors:
        tensors["optimizer_states"] = [_with_str_ids(state) for state in tensors["optimizer_states"]]
    meta = {key: value for key, value in checkpoint.items() if key not in SHARDED_KEYS}
    return tensors, meta


def _with_str_ids(state: Mapping[str, Any]) -> dict[str, Any]:
    return {**state, "state": {str(pid): slots for pid, slots in state.get("state", {}).items()}}


def _with_int_ids(state: Mapping[str, Any]) -> dict[str, Any]:
    return {**state, "state": {int(pid): slots for pid, slots in state.get("state", {}).items()}}


def write_sharded_checkpoint(
    checkpoint: Mapping[str, Any],
    path: str | os.PathLike,
    tmp: Path,
    coordinator: bool,
    no_dist: bool = False,
    async_group: Any = None,
) -> Future | None:
    """Write ``checkpoint`` as a sharded folder at ``path``. Collective: every rank calls it with the same ``tmp``.

    Each rank writes the shards of its DTensors (plain tensors, the same on every rank, are written once); the
    coordinator (rank 0) then writes ``meta.pt`` and swaps the folder into place.

    Args:
        checkpoint: the Lightning checkpoint dict; under FSDP2 its ``state_dict`` and ``optimizer_states`` hold
            DTensors.
        path: the target, e.g. ``checkpoints/last.ckpt``; a file or folder already there is replaced atomically.
        tmp: the temporary folder from :func:`temporary_folder`, the same on every rank.
        coordinator: whether this is rank 0.
        no_dist: one process, without a process group (``lightning-mgpu convert``).
        async_group: save in the background (``torch.distributed.checkpoint.async_save``) over this process group,
            which must not be the one training uses (the save's collectives run in another thread). The tensors are
            copied to CPU memory before this returns; the folder lands when the returned future completes.

    Returns:
        With ``async_group``, a future that completes once this rank's part is written (on rank 0: once the folder is
        in place); otherwise ``None``.
    """
    import torch.distributed.checkpoint as dcp

    path = Path(path)
    tensors, meta = split_checkpoint(checkpoint)
    if coordinator:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_folders(path, keep=tmp)
    writer = dcp.FileSystemWriter(str(tmp), sync_files=True)
    if async_group is None:
        dcp_save(tensors, writer, no_dist=no_dist)
        if coordinator:
            _land(_serialized(meta), tmp, path)
        return None
    # The rest is serialized now: the loops and callbacks it describes move on while the shards are written.
    meta_bytes = _serialized(meta) if coordinator else b""
    saved = dcp.async_save(tensors, storage_writer=writer, process_group=async_group)
    landed: Future = Future()

    def _finish(done: Future) -> None:
        try:
            done.result()  # on rank 0 only after every rank's shards and .metadata are written
            if coordinator:
                _land(meta_bytes, tmp, path)
        except BaseException as err:  # noqa: BLE001  (handed to whoever waits on the future)
            landed.set_exception(err)
        else:
            landed.set_result(None)

    saved.add_done_callback(_finish)  # type: ignore[union-attr]
    return landed


class BackgroundSaves:
    """One strategy's sharded saves that land in the background (``async_save=True``), one in flight at a time.

    Their collectives run over a gloo group of their own, apart from training's, made on the first save (a collective:
    every rank saves). The interpreter's exit waits for the save in flight.
    """

    def __init__(self) -> None:
        self.group: Any = None
        self._pending: Future | None = None

    def start(self, checkpoint: Mapping[str, Any], path: str | os.PathLike, tmp: Path, coordinator: bool) -> None:
        """Copy ``checkpoint``'s shards to CPU memory and write them in the background, once the previous save
        landed."""
        self.wait()
        if self.group is None:
            import torch.distributed as dist

            self.group = dist.new_group(backend="gloo")
            # Registered after destroy_at_exit's hook, so it runs first: the save's collectives need the groups.
            atexit.register(self.wait)
        self._pending = write_sharded_checkpoint(checkpoint, path, tmp, coordinator, async_group=self.group)

    def wait(self) -> None:
        """Block until the save in flight has landed; raise its error if it failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def abandon(self) -> None:
        """Stop waiting for the save in flight: another rank failed and may never write its part. The previous
        checkpoint stays in place, and the next save removes the temporary folder."""
        self._pending = None


def _serialized(meta: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(dict(meta), buffer)
    return buffer.getvalue()


def _land(meta_bytes: bytes, tmp: Path, path: Path) -> None:
    """Rank 0's end of a save: ``meta.pt`` beside the shards, then the folder swapped into place."""
    with open(tmp / META_FILENAME, "wb") as f:
        f.write(meta_bytes)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)
    replace_path(tmp, path)


def replace_path(new: Path, path: Path) -> None:
    """Put the folder ``new`` at ``path`` in one atomic step, then delete what was there (a file or a folder)."""
    if not os.path.lexists(path):
        os.rename(new, path)
    elif _exchange(new, path):
        # `new` now holds the previous checkpoint.
        shutil.rmtree(new, ignore_errors=True) if new.is_dir() else new.unlink()
    else:
        # No RENAME_EXCHANGE on this filesystem: move the old one aside under a temporary name, so that a kill
        # between the two renames leaves it (removed by the next save) and never half of either.
        aside = temporary_folder(path)
        os.rename(path, aside)
        os.rename(new, path)
        shutil.rmtree(aside, ignore_errors=True) if aside.is_dir() else aside.unlink()
    fsync_dir(path.parent)


def _exchange(a: Path, b: Path) -> bool:
    """``renameat2(a, b, RENAME_EXCHANGE)`` (Linux 3.15+): swap two paths atomically. False where unsupported."""
    with contextlib.suppress(AttributeError, OSError):
        libc = ctypes.CDLL(None, use_errno=True)
        at_fdcwd, rename_exchange = -100, 2
        if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return True
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(err, f"renameat2({a}, {b}, RENAME_EXCHANGE): {os.strerror(err)}")
    return False


#: module -> the names a DCP ``.metadata`` may name in it (every one builds plain data, none runs code)
_METADATA_GLOBALS = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "StorageMeta",
        "MetadataIndex",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},  # a torch.layout by its name
    "torch": {"Size"},  # and the dtypes, checked below
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    @override
    def find_class(self, module: str, name: str) -> Any:
        if name in _METADATA_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name}")


def folder_reader(path: str | os.PathLike) -> Any:
    """torch.distributed.checkpoint's ``FileSystemReader`` for ``path``, reading ``.metadata`` as data.

    Raises:
        UnsafeCheckpointError: from ``read_metadata``, when ``.metadata`` names anything outside DCP's metadata types
            (nothing was executed).
    """
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class _Reader(FileSystemReader):
        @override
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            where = getattr(self, "_get_metadata_path", None)  # torch >= 2.8; before, always .metadata
            metadata_path = where(kwargs.get("rank")) if where else self.fs.concat_path(self.path, ".metadata")
            with self.fs.create_stream(metadata_path, "rb") as stream:
                try:
                    metadata = _MetadataUnpickler(stream).load()
                except pickle.UnpicklingError as err:
                    raise UnsafeCheckpointError(
                        f"Refused to load {path}: its .metadata names {err}, which a sharded checkpoint never holds,"
                        " and unpickling it could run code. Nothing was executed. Use a folder you or your jobs wrote."
                    ) from None
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = getattr(self, "load_id", None)
            return metadata

    return _Reader(str(path))


def load_planner(empty: bool = False) -> Any:
    """A DCP load planner whose non-tensor entries (optimizer hyper-parameters, ...) are read with ``weights_only=True``
    (torch's own reads them with a full unpickle). ``empty``: the target is built from the folder's metadata."""
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner

    base = _EmptyStateDictLoadPlanner if empty else DefaultLoadPlanner

    class _Planner(base):  # type: ignore[valid-type,misc]
        # DefaultLoadPlanner.load_bytes, with weights_only=True where torch passes False.
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            loaded = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return _Planner()


def read_sharded_tensors(path: str | os.PathLike) -> dict[str, Any]:
    """The whole tensor part of a sharded folder (every shard joined, on the CPU), in a full checkpoint's layout.

    One process, no process group: what ``lightning-mgpu convert`` and a non-sharded strategy loading a folder use.
    It holds the whole model and optimizer state, as the full checkpoint it stands for would.
    """
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    folder_reader(path).read_metadata()  # a crafted .metadata is refused here, by name, not inside DCP's wrappers
    state: dict[str, Any] = {}
    # What torch's own dcp_to_torch_save does: an empty target that the planner fills from the metadata.
    _load_state_dict(state, storage_reader=folder_reader(path), planner=load_planner(empty=True), no_dist=True)
    if "optimizer_states" in state:
        state["optimizer_states"] = [_with_int_ids(s) for s in state["optimizer_states"]]
    return state


def sharded_model_keys(path: str | os.PathLike) -> set[str]:
    """The model keys of a sharded folder, read from its metadata alone (no tensor is loaded)."""
    planner_data = folder_reader(path).read_metadata().planner_data or {}
    return {str(where[1]) for where in planner_data.values() if len(where) == 2 and where[0] == "state_dict"}


def saved_entries(path: str | os.PathLike) -> list[tuple[tuple[Any, ...], Any]]:
    """``(path in the checkpoint dict, storage metadata)`` of every entry of a folder, from its metadata alone."""
    metadata = folder_reader(path).read_metadata()
    planner_data = metadata.planner_data or {}
    return [(tuple(planner_data[key]), md) for key, md in metadata.state_dict_metadata.items() if key in planner_data]


def _dcp_load(state: dict[str, Any], path: str | os.PathLike) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.load(state, storage_reader=folder_reader(path), planner=load_planner())


def read_sharded_model(path: str | os.PathLike, template: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The whole model state of a folder, read into ``template``'s tensors (same keys, this rank's device). Collective
    under a process group: every rank calls it."""
    state = {"state_dict": dict(template)}
    _dcp_load(state, path)
    return state["state_dict"]


def check_saved_optimizer_count(
    path: str | os.PathLike, entries: list[tuple[tuple[Any, ...], Any]], count: int
) -> None:
    """Refuse a folder (its :func:`saved_entries`) that holds the state of another number of optimizers than ``count``.

    Raises:
        ValueError: naming both counts and the fix.
    """
    saved = {where[1] for where, _ in entries if where[0] == "optimizer_states"}
    if len(saved) != count:
        raise ValueError(
            f"{path} holds the state of {len(saved)} optimizer(s), this model has {count}. Resume it with the"
            " configure_optimizers it was saved with, or start without ckpt_path; the checkpoint is left as it is."
        )


def match_saved_group_options(entries: list[tuple[tuple[Any, ...], Any]], target: Any) -> None:
    """Give each optimizer param group of a load target (``target["optimizer_states"]``) the options the folder holds
    for it (its :func:`saved_entries`), no more and no fewer.

    torch's ``Optimizer.load_state_dict`` replaces the groups with the saved ones, whatever the optimizer holds now.
    torch.distributed.checkpoint instead reads what the target names, and refuses a key the folder lacks. The options
    differ when the optimizer changed between save and load; Lightning's LearningRateFinder does that: it saves, gives
    the groups ``initial_lr`` for its search, and loads the folder back. A ``None`` stands for an option the target
    lacks, until the load fills it.
    """
    saved: dict[tuple[int, int], set[Any]] = {}
    for where, _ in entries:
        if len(where) >= 5 and where[0] == "optimizer_states" and where[2] == "param_groups":
            saved.setdefault((int(where[1]), int(where[3])), set()).add(where[4])
    for index, state in enumerate(target.get("optimizer_states", [])):
        for number, group in enumerate(state.get("param_groups", [])):
            options = saved.get((index, number))
            if options is None:  # a group the folder does not hold: check_saved_optimizer_count and DCP name it
                continue
            for key in [k for k in group if k != "params" and k not in options]:
                del group[key]
            for key in options - group.keys():
                group[key] = None


def read_owned_optimizer_state(
    path: str | os.PathLike,
    entries: list[tuple[tuple[Any, ...], Any]],
    index: int,
    owned: list[int],
    param_groups: list[dict[str, Any]],
    num_optimizers: int,
) -> dict[str, Any]:
    """Optimizer ``index``'s saved state for the parameter indices ``owned`` only, with its saved param groups, in
    torch's ordinary layout. Each rank reads what it owns now, whatever the number of ranks that wrote the folder.
    ``entries``: the folder's :func:`saved_entries`, read once for all its optimizers. Collective under a process
    group: every rank calls it (with its own ``owned``).

    Raises:
        ValueError: the folder holds another number of parameter groups.
    """
    wanted = {str(i) for i in owned}
    slots: dict[str, dict[str, Any]] = {}
    groups: dict[int, dict[str, Any]] = {}
    for where, md in entries:
        if where[:2] != ("optimizer_states", index):
            continue
        if where[2] == "state" and where[3] in wanted:
            # Full-size tensors for what this rank owns; torch.distributed.checkpoint joins them from the saved shards.
            size, dtype = getattr(md, "size", None), getattr(getattr(md, "properties", None), "dtype", None)
            slots.setdefault(where[3], {})[where[4]] = torch.empty(size, dtype=dtype) if size is not None else None
        elif where[2] == "param_groups":
            groups.setdefault(int(where[3]), {})[where[4]] = None
    if len(groups) != len(param_groups):
        raise ValueError(
            f"{path} holds {len(groups)} parameter group(s) for optimizer {index}, this one has {len(param_groups)}."
        )
    target: list[dict[str, Any]] = [{} for _ in range(num_optimizers)]
    target[index] = {"state": slots, "param_groups": [groups[g] for g in sorted(groups)]}
    state = {"optimizer_states": target}
    _dcp_load(state, path)
    return _with_int_ids(state["optimizer_states"][index])
