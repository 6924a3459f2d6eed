"""The optimizer plumbing strategies share: unwrapping Lightning's wrapper, scheduler re-binding, step marking."""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from torch import nn

from lightning_mgpu.utilities.optimizers import (
    local_optimizer_state_bytes,
    mark_step_calls,
    rebind_scheduler,
    unwrap_optimizer,
)


def test_unwrap_peels_lightning_optimizers_only() -> None:
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)
    assert unwrap_optimizer(opt) is opt
    assert unwrap_optimizer(LightningOptimizer(opt)) is opt


def _sgd(model: nn.Module, lr: float = 1.0) -> torch.optim.SGD:
    return torch.optim.SGD(model.parameters(), lr=lr)


def _sequential(opt: torch.optim.Optimizer) -> tuple[torch.optim.lr_scheduler.SequentialLR, list]:
    warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=2)
    decay = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    return torch.optim.lr_scheduler.SequentialLR(opt, [warmup, decay], milestones=[2]), [warmup, decay]


def _run(model: nn.Module, opt: torch.optim.Optimizer, sched: object, steps: int = 5) -> list[float]:
    lrs = []
    for _ in range(steps):
        model(torch.ones(3, 2)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()  # type: ignore[attr-defined]
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def test_chained_schedulers_are_rebound_and_step_without_warnings() -> None:
    model = nn.Linear(2, 2)
    old = _sgd(model)
    chained, children = _sequential(old)
    # The replacement shares the param groups, as hvd.DistributedOptimizer does with the optimizer it wraps.
    new = torch.optim.SGD(model.parameters(), lr=1.0)
    new.param_groups = old.param_groups
    rebind_scheduler(chained, {id(old): new})
    # Every scheduler of the chain now drives the new optimizer (the top-level-only re-binding missed these).
    assert chained.optimizer is new and all(child.optimizer is new for child in children)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither "step() overridden" nor "lr_scheduler.step() before optimizer.step()"
        # torch <= 2.6's SequentialLR calls step(0) on its own children at a milestone, and warns about it itself.
        warnings.filterwarnings(
            "ignore", message=r"The epoch parameter in `scheduler.step\(\)` was not necessary", category=UserWarning
        )
        lrs = _run(model, new, chained)
    reference_model = nn.Linear(2, 2)
    reference_opt = _sgd(reference_model)
    assert lrs == pytest.approx(_run(reference_model, reference_opt, _sequential(reference_opt)[0]))
    assert lrs[0] != lrs[-1]  # the schedule really moved


def test_unknown_optimizers_are_left_alone() -> None:
    model = nn.Linear(2, 2)
    opt = _sgd(model)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    rebind_scheduler(sched, {id(_sgd(model)): _sgd(model)})
    assert sched.optimizer is opt


def test_step_marking_keeps_the_optimizer_collectable_and_is_idempotent() -> None:
    opt = _sgd(nn.Linear(2, 2))
    mark_step_calls(opt)
    first = opt.step
    mark_step_calls(opt)
    assert opt.step is first and first.__name__ == "step"
    opt.step()
    assert opt._opt_called is True
    ref = weakref.ref(opt)
    del opt, first
    gc.collect()
    assert ref() is None  # no strong reference from the wrapper to its optimizer


def test_state_bytes_count_adam_state() -> None:
    layer = nn.Linear(8, 4)
    opt = torch.optim.Adam(layer.parameters())
    assert local_optimizer_state_bytes(opt) == 0
    layer(torch.randn(2, 8)).sum().backward()
    opt.step()
    # exp_avg + exp_avg_sq in fp32 per element, plus a 4-byte `step` per parameter tensor.
    assert local_optimizer_state_bytes(opt) == 2 * 4 * (8 * 4 + 4) + 2 * 4
