"""Checkpoint formats, in one place: the files and folders every strategy of the bundle writes and reads.

- :mod:`~lightning_mgpu.checkpoint.io`: one file, written atomically (temporary file, fsync, rename) and read the safe
  way (``weights_only`` with an allow-list); :class:`AtomicCheckpointIO`, every bundle strategy's default, which also
  reads sharded folders; :func:`read_checkpoint` and :func:`load_state_dict` (plain keys or ``module.`` ones, either
  way) for your own code.
- :mod:`~lightning_mgpu.checkpoint.sharded`: a folder that every rank writes its shards into, landed atomically, in the
  background if asked; it reshards on load (N ranks -> M).
- :mod:`~lightning_mgpu.checkpoint.keys`: the one map from parameters to the keys of saved optimizer state.
- :mod:`~lightning_mgpu.checkpoint.convert`: ``python -m lightning_mgpu convert``, a folder <-> one file, ->
  safetensors.

Everything here builds on :mod:`lightning_mgpu.utilities` and :mod:`lightning_mgpu.security` (the check at every load)
only; the strategies, callbacks and tools import it.
"""

from __future__ import annotations

from lightning_mgpu.utilities.imports import lazy_exports

# name -> module, imported on first use (reading a name here imports torch and Lightning; the package does not).
_EXPORTS = {
    "AtomicCheckpointIO": "io",
    "CheckpointKeyMismatchError": "io",
    "CheckpointReadError": "io",
    "CheckpointSaveError": "io",
    "UnsafeCheckpointError": "io",
    "check_checkpoint_matches": "io",
    "load_checkpoint_file": "io",
    "load_state_dict": "io",
    "read_checkpoint": "io",
    "is_sharded_checkpoint": "sharded",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
