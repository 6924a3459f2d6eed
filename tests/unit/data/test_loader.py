"""resumable_loader: the loader's position, its samplers' orders and the global RNG across a save and a load."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from lightning_mgpu.data.loader import ResumableDistributedSampler, resumable_loader


def _epochs(loader, n: int) -> list[list[int]]:
    return [[int(i) for batch in loader for i in batch[0]] for _ in range(n)]


def test_a_mid_epoch_state_resumes_this_epoch_and_the_following_ones() -> None:
    data = TensorDataset(torch.arange(20))
    reference = _epochs(resumable_loader(data, batch_size=4, shuffle=True, seed=3), 3)
    first = resumable_loader(data, batch_size=4, shuffle=True, seed=3)
    seen = _epochs(first, 1)
    it = iter(first)
    seen.append([int(i) for _ in range(2) for i in next(it)[0]])
    state = first.state_dict()
    resumed = resumable_loader(data, batch_size=4, shuffle=True, seed=3)
    resumed.load_state_dict(state)
    rest = _epochs(resumed, 2)
    assert seen[0] == reference[0]
    assert seen[1] + rest[0] == reference[1]  # the rest of the interrupted epoch
    assert rest[1] == reference[2]  # and the next epoch's order, although the loader's generator was not restored
    assert reference[0] != reference[1]


def test_building_and_iterating_never_draws_from_the_global_rng() -> None:
    before = torch.get_rng_state()
    _epochs(resumable_loader(TensorDataset(torch.arange(10)), batch_size=3, shuffle=True), 2)
    _epochs(resumable_loader(TensorDataset(torch.arange(10)), batch_size=3), 1)
    assert torch.equal(before, torch.get_rng_state())


def test_distributed_sampler_iterator_keeps_its_epoch_and_position() -> None:
    sampler = ResumableDistributedSampler(list(range(16)), num_replicas=2, rank=1, shuffle=True, seed=5)
    sampler.set_epoch(3)
    it = iter(sampler)
    taken = [next(it) for _ in range(3)]
    state = it.state_dict()
    assert state == {"epoch": 3, "yielded": 3}

    fresh = ResumableDistributedSampler(list(range(16)), num_replicas=2, rank=1, shuffle=True, seed=5)
    # As Lightning does on resume: the iterator exists (and is loaded) before set_epoch is called for that epoch.
    resumed = iter(fresh)
    resumed.load_state_dict(state)
    fresh.set_epoch(3)
    assert taken + list(resumed) == list(iter(sampler))

    # A state saved at the end of an epoch: the next iterator follows set_epoch, not the saved epoch.
    done = iter(fresh)
    done.load_state_dict({"epoch": 3, "yielded": 8})
    fresh.set_epoch(4)
    sampler.set_epoch(4)
    assert list(done) == list(iter(sampler))


def test_a_state_saved_at_an_epochs_end_gives_the_next_epochs_order() -> None:
    """A single process shuffles by seed and epoch: a loader restored from the end of epoch 0 shuffles epoch 1 as an
    uninterrupted loader does (restoring a generator to epoch 0's start would replay epoch 0)."""
    data = TensorDataset(torch.arange(20))
    reference = _epochs(resumable_loader(data, batch_size=4, shuffle=True, seed=3), 2)
    first = resumable_loader(data, batch_size=4, shuffle=True, seed=3)
    _epochs(first, 1)
    state = first.state_dict()
    resumed = resumable_loader(data, batch_size=4, shuffle=True, seed=3)
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(1)  # what Lightning does at the start of the resumed epoch
    assert _epochs(resumed, 1)[0] == reference[1] != reference[0]
