"""Unit tests of the bounded rendezvous; train.py's failures across processes are in
tests/integration/examples/test_rendezvous.py."""

from __future__ import annotations

from datetime import timedelta

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from lightning_mgpu.launchers.rendezvous import (
    RendezvousTimeout,
    RendezvousTimeoutError,
)
from lightning_mgpu.testing.parity import ParityModule
from tests.helpers.trainer import quiet_trainer


@pytest.mark.parametrize("seconds", [0, -1.0])
def test_a_non_positive_timeout_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        RendezvousTimeout(seconds)


def test_apply_bounds_only_strategies_with_a_process_group_timeout() -> None:
    rendezvous = RendezvousTimeout(7)
    ddp = DDPStrategy(timeout=timedelta(minutes=45))
    assert rendezvous.apply(ddp) is True
    assert ddp._timeout == timedelta(seconds=7)
    assert rendezvous._collective_timeout == timedelta(minutes=45)  # what setup gives back
    assert RendezvousTimeout(7).apply(SingleDeviceStrategy(torch.device("cpu"))) is False


def test_explain_names_the_address_for_rendezvous_errors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_ADDR", "node0.example")
    monkeypatch.setenv("MASTER_PORT", "29517")
    rendezvous = RendezvousTimeout(9)
    err = rendezvous.explain(dist.DistNetworkError("The client socket has timed out after 9000ms"), rank=3)
    assert isinstance(err, RendezvousTimeoutError)
    text = str(err)
    assert "node0.example:29517" in text and "9 s" in text and "global rank 3" in text and "--rdzv-timeout" in text
    try:  # a wrapped store timeout (rank 0 waited for nodes that never came) is found through the chain
        try:
            raise dist.DistStoreError("Timed out after 9 seconds waiting for clients. 1/2 clients joined.")
        except dist.DistStoreError as inner:
            raise RuntimeError("setup failed") from inner
    except RuntimeError as wrapped:
        assert "1/2 clients joined" in str(rendezvous.explain(wrapped))
    assert rendezvous.explain(ValueError("not a rendezvous")) is None
    rendezvous.connected = True  # once the group exists, a network error is a dead peer, not the rendezvous
    assert rendezvous.explain(dist.DistNetworkError("reset by peer")) is None


class _RecordTimeouts(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from torch.distributed.distributed_c10d import _get_default_store

        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        self.collective = backend.options._timeout
        self.store = _get_default_store().timeout


def test_the_rendezvous_is_bounded_and_collectives_get_their_timeout_back() -> None:
    rendezvous, record = RendezvousTimeout(11), _RecordTimeouts()
    trainer = quiet_trainer(
        strategy=DDPStrategy(timeout=timedelta(minutes=40)), max_steps=1, callbacks=[rendezvous, record]
    )
    rendezvous.apply(trainer.strategy)
    try:
        trainer.fit(ParityModule())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert record.store == timedelta(seconds=11)  # the store was created (connect and join) under the bound
    assert record.collective == timedelta(minutes=40)  # collectives: the strategy's own timeout again
    assert trainer.strategy._timeout == timedelta(minutes=40)
