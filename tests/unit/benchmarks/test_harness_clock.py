"""benchmarks.harness.clock and models.train_step: the raw loops' clock and step, and a timed call."""

from __future__ import annotations

import time

import torch

from benchmarks.harness.clock import raw_steps, timed
from benchmarks.harness.models import mlp, train_step
from benchmarks.harness.stats import median_interval


def test_raw_steps_marks_each_step_and_draws_no_batch_past_the_last() -> None:
    drawn: list[int] = []

    def batches():  # type: ignore[no-untyped-def]
        for i in range(100):
            drawn.append(i)
            yield torch.full((2,), float(i)), torch.zeros(2)

    stepped: list[float] = []

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        stepped.append(float(x[0]))
        time.sleep(0.01)

    wall, cpu = raw_steps(step, batches(), 5, torch.device("cpu"))
    assert stepped == [0, 1, 2, 3, 4] and drawn == [0, 1, 2, 3, 4]
    assert len(wall) == len(cpu) == 6  # every step's start and the last one's end
    assert median_interval(wall, 1, 4) >= 0.01
    assert all(b >= a for a, b in zip(cpu, cpu[1:]))


def test_train_step_is_one_optimizer_step_in_lightnings_order() -> None:
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    model, reference = mlp(3, 5, 2), mlp(3, 5, 2)  # the same seed: the same weights
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = train_step(model, optimizer)
    step(x, y)
    step(x, y)  # zero_grad first: the second step's gradient is not the sum of both
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))


def test_timed_measures_the_call() -> None:
    assert 0.02 <= timed(lambda: time.sleep(0.02)) < 1.0
    assert timed(lambda: None, torch.device("cpu")) < 0.5
