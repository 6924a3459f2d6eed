"""Every rank's random-number generators in the checkpoint, so that a resumed run draws what the first run would have.

Lightning checkpoints the model, optimizers, loops and (with a stateful loader) the data position, but not the RNGs:
after a resume, dropout masks and random augmentations differ from an uninterrupted run. ``RNGStates`` adds them.
They are kept as plain tensors (never pickled objects), so checkpoints still load with ``weights_only=True``, and one
row per rank, because ranks are seeded differently.
"""

from __future__ import annotations

import random
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightning_mgpu.utilities.collectives import gather_rows

KEY = "rng_states"


def collect_rng_states() -> dict[str, torch.Tensor]:
    """This process's torch, CUDA (current device), numpy and Python RNG states as fixed-size tensors."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    assert np_name == "MT19937"
    py_version, py_internal, py_gauss = random.getstate()
    states = {
        "torch": torch.get_rng_state(),
        "numpy_keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
        "numpy_extra": torch.tensor([np_pos, np_has_gauss, np_gauss], dtype=torch.float64),
        "python": torch.tensor(py_internal, dtype=torch.int64),
        "python_extra": torch.tensor([py_version, py_gauss is not None, py_gauss or 0.0], dtype=torch.float64),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: dict[str, torch.Tensor]) -> None:
    """Restore what :func:`collect_rng_states` returned (one rank's row)."""
    torch.set_rng_state(states["torch"].to(torch.uint8).cpu())
    pos, has_gauss, gauss = states["numpy_extra"].tolist()
    np.random.set_state(("MT19937", states["numpy_keys"].numpy().astype(np.uint32), int(pos), int(has_gauss), gauss))
    version, has_py_gauss, py_gauss = states["python_extra"].tolist()
    random.setstate((int(version), tuple(states["python"].tolist()), py_gauss if has_py_gauss else None))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"].to(torch.uint8).cpu())


class RNGStates(Callback):
    """Save each rank's RNG states with every checkpoint and restore them when training resumes from it.

    Restored when the checkpoint is loaded, before the sanity check and the first batch. Exact resume also needs the
    data loaders not to draw from the global RNG: :func:`lightning_mgpu.data.loader.resumable_loader` gives them
    their own generator. Resuming on a different number of ranks restores the saved ranks' rows where they exist
    and warns for the others.

    Example::

        trainer = Trainer(strategy="ddp", devices=2, callbacks=[RNGStates(), ModelCheckpoint(save_last=True)])
    """

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Lightning builds the checkpoint on every rank and writes rank 0's: gather every rank's row into it.
        local = collect_rng_states()
        device = trainer.strategy.root_device
        gathered = {}
        for name, tensor in local.items():
            gathered[name] = gather_rows(trainer.strategy, tensor.to(device)).cpu()
        checkpoint[KEY] = gathered

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        saved = checkpoint.get(KEY)
        if saved is None:
            rank_zero_warn(
                "The checkpoint has no RNG states (saved without RNGStates): random draws after resume differ."
            )
            return
        rank, ranks = trainer.global_rank, len(saved["torch"])
        if rank >= ranks:
            rank_zero_warn(
                f"The checkpoint holds the RNG states of {ranks} rank(s); ranks {ranks}.. keep their own seeds."
            )
            return
        # clone: a row is a view into the stacked tensor, and torch.set_rng_state reads its storage from the start.
        set_rng_states({name: rows[rank].clone() for name, rows in saved.items()})
