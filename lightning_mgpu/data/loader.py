"""A training DataLoader that a checkpoint can resume mid-epoch, exactly.

Lightning saves and restores the position of a training loader that has ``state_dict``/``load_state_dict``
(its ``_Stateful`` protocol). torchdata's ``StatefulDataLoader`` is a drop-in ``DataLoader`` with both: it records
the sampler's position (and a ``RandomSampler``'s generator), so a run resumed from a mid-epoch checkpoint sees the
same remaining batches as a run that never stopped. :func:`resumable_loader` builds one with the two settings exact
resume also needs:

- **its own seeded generators**, so creating an iterator never draws from the global torch RNG: a resumed run creates
  iterators at different moments (sanity check, mid-epoch restart) than an uninterrupted one, and the model's own
  random numbers (dropout) must not shift with them. The shuffling sampler gets a generator of its own too: the
  loader draws a worker base seed from its generator at every ``iter()``, and a sampler sharing it would shuffle the
  epochs after a resume differently (torchdata restores the sampler's generator, not the loader's);
- **workers that ignore Ctrl-C**: SIGINT reaches the whole foreground process group, and a worker that dies of it
  would take the batches the training process still needs to reach a clean stop (see ``SaveOnInterrupt``).
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler

from lightning_mgpu.utilities.process_group import data_parallel_rank_and_size

# torchdata 0.11 calls torch.set_vital, which torch >= 2.9 deprecates, each time a loader is built; nothing of ours
# or the user's can act on it.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning, module="torchdata")


def ignore_sigint_worker_init(worker_id: int) -> None:
    """``worker_init_fn``: the worker ignores SIGINT, then seeds itself as Lightning would
    (``seed_everything(workers=True)``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if int(os.environ.get("PL_SEED_WORKERS", 0)):
        # Lightning adds its seeding only to loaders without a worker_init_fn; keep it.
        from lightning.fabric.utilities.seed import pl_worker_init_function

        pl_worker_init_function(worker_id)


def resumable_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    num_workers: int = 0,
    drop_last: bool = False,
    **kwargs: Any,
) -> Any:
    """A ``torchdata.stateful_dataloader.StatefulDataLoader`` whose position Lightning checkpoints and restores.

    Args:
        dataset: the map-style dataset.
        batch_size: samples per batch (per process; Lightning adds a ``DistributedSampler`` under ddp).
        shuffle: shuffle each epoch. In a multi-process job (a ``torch.distributed`` group: ddp, sharded; or
            Horovod) the loader gets a :class:`ResumableDistributedSampler`, seeded with ``seed`` and the epoch.
        seed: seed of the loader's own generator (shuffling order, worker base seeds).
        num_workers: worker processes; ``persistent_workers`` is on when there are any.
        drop_last: drop the last incomplete batch.
        **kwargs: passed on to ``StatefulDataLoader`` (``pin_memory``, ``collate_fn``, ...).

    Example::

        def train_dataloader(self):
            return resumable_loader(self.train_set, batch_size=32, shuffle=True, seed=self.hparams.seed)
    """
    from torchdata.stateful_dataloader import StatefulDataLoader

    kwargs.setdefault("worker_init_fn", ignore_sigint_worker_init if num_workers > 0 else None)
    group = data_parallel_rank_and_size() if shuffle else None
    if group is not None:
        # Lightning keeps a DistributedSampler it is given (and still calls set_epoch on it); a plain one it would put
        # in its place replays epoch 0 on resume. Horovod has no torch.distributed group: give the ranks explicitly.
        rank, world = group
        kwargs["sampler"] = ResumableDistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    elif shuffle:
        kwargs["sampler"] = ResumableRandomSampler(dataset, seed=seed)
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        drop_last=drop_last,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        # Worker base seeds only (the sampler has its own): never the global RNG.
        generator=torch.Generator().manual_seed(seed + 1),
        **kwargs,
    )


class ResumableRandomSampler(RandomSampler):
    """A shuffling sampler whose order is a function of its seed and epoch, and whose iterator checkpoints its position.

    A ``torch.utils.data.RandomSampler`` (Lightning recognises a shuffling loader by that class). Each epoch's order
    comes from ``seed + epoch`` alone, not from a generator's history: a run resumed from a checkpoint taken at an
    epoch's end shuffles the next epoch as a run that never stopped does (a generator restored to that epoch's start
    would replay it). Lightning calls :meth:`set_epoch` at every epoch; without Lightning, the epoch advances by one
    each time an iteration runs to its end.

    Args:
        data_source: the dataset.
        seed: the base of every epoch's permutation.
    """

    def __init__(self, data_source: Any, seed: int = 0) -> None:
        super().__init__(data_source)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def epoch_indices(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(len(self.data_source), generator=generator).tolist()

    def __iter__(self) -> Iterator[int]:
        return _EpochIterator(self)


class ResumableDistributedSampler(DistributedSampler):
    """A ``DistributedSampler`` whose iterator checkpoints its epoch and position.

    torchdata builds a sampler's iterator as soon as the loader's iterator exists, and Lightning creates that one on
    resume (then fast-forwarded to the saved position) before it calls ``set_epoch`` for the resumed epoch: a plain
    ``DistributedSampler`` would replay epoch 0's order. This iterator chooses its epoch at the first index it
    yields, after ``set_epoch``, and on load rebuilds the saved epoch's order at the saved position.
    """

    def epoch_indices(self, epoch: int) -> list[int]:
        current, self.epoch = self.epoch, epoch
        try:
            return list(DistributedSampler.__iter__(self))
        finally:
            self.epoch = current

    def __iter__(self) -> Iterator[int]:
        return _EpochIterator(self)


class _EpochIterator(Iterator[int]):
    """One epoch of a resumable sampler (random or distributed); ``state_dict`` makes torchdata save it
    (``Stateful``)."""

    def __init__(self, sampler: ResumableRandomSampler | ResumableDistributedSampler) -> None:
        self.sampler = sampler
        self.indices: list[int] | None = None  # chosen at the first __next__, or by load_state_dict
        self.epoch, self.yielded = sampler.epoch, 0

    def _start(self, epoch: int, yielded: int) -> None:
        self.indices = self.sampler.epoch_indices(epoch)
        self.epoch, self.yielded = epoch, yielded

    def __next__(self) -> int:
        if self.indices is None:
            self._start(self.sampler.epoch, 0)
        assert self.indices is not None
        if self.yielded >= len(self.indices):
            if isinstance(self.sampler, ResumableRandomSampler) and self.sampler.epoch <= self.epoch:
                # A fresh order next time, as RandomSampler gives (set_epoch, which Lightning calls, has the last word).
                self.sampler.epoch = self.epoch + 1
            raise StopIteration
        self.yielded += 1
        return self.indices[self.yielded - 1]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "yielded": self.yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["yielded"]) >= len(self.sampler):
            return  # saved at the end of an epoch: the next one starts afresh, with the epoch set_epoch gives
        self._start(int(state["epoch"]), int(state["yielded"]))


def loader_batch_size(loader: Any) -> int | None:
    """Samples per batch of ``loader``, also when it is built around a batch sampler (``batch_size`` is then None).

    Lightning builds a ``StatefulDataLoader`` that way when it swaps in its ``DistributedSampler`` (Horovod).
    """
    size = getattr(loader, "batch_size", None)
    return size if size is not None else getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
