"""``lightning_mgpu.upgrade.legacy_metrics``: the stand-ins compute what torchmetrics 0.10.3 computed.

The figures below are torchmetrics 0.10.3's own (``torchmetrics.functional.accuracy``, ``auroc`` and ``Accuracy()``
called without ``num_classes``, on torch 1.13.1), for the inputs :func:`cases` makes with Python's ``random`` (the same
numbers on every torch). Where 0.10.3 raised, the case is left out of that figure.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchmetrics")

from lightning_mgpu.upgrade.legacy_metrics import LegacyAccuracy, legacy_accuracy, legacy_auroc  # noqa: E402


def cases() -> dict[str, tuple[list, list]]:
    """Each shape torchmetrics 0.10 read a task off: (preds, target) as nested lists."""
    rnd = random.Random(7)
    n, c, h = 40, 4, 3

    def floats(*shape: int, lo: float = -3.0, hi: float = 3.0) -> list:
        if len(shape) == 1:
            return [round(rnd.uniform(lo, hi), 4) for _ in range(shape[0])]
        return [floats(*shape[1:], lo=lo, hi=hi) for _ in range(shape[0])]

    def ints(k: int, *shape: int) -> list:
        if len(shape) == 1:
            return [rnd.randrange(k) for _ in range(shape[0])]
        return [ints(k, *shape[1:]) for _ in range(shape[0])]

    return {
        "binary_probs": (floats(n, lo=0, hi=1), ints(2, n)),
        "multiclass_logits": (floats(n, c), ints(c, n)),
        "multiclass_probs": (floats(n, c, lo=0, hi=1), ints(c, n)),
        "multilabel_probs": (floats(n, c, lo=0, hi=1), ints(2, n, c)),
        "int_labels": (ints(c, n), ints(c, n)),
        "int_binary_2d": (ints(2, n, c), ints(2, n, c)),
        "multidim_multiclass": (floats(n, c, h), ints(c, n, h)),
    }


#: torchmetrics 0.10.3's accuracy(preds, target)
ACCURACY_0_10 = {
    "binary_probs": 0.44999998807907104,
    "multiclass_logits": 0.22499999403953552,
    "multiclass_probs": 0.2750000059604645,
    "multilabel_probs": 0.518750011920929,
    "int_labels": 0.22499999403953552,
    "int_binary_2d": 0.4749999940395355,
    "multidim_multiclass": 0.20000000298023224,
}
#: torchmetrics 0.10.3's Accuracy(): forward() on batches of 16, then compute() over the three
ACCURACY_CLASS_0_10 = {
    "binary_probs": ([0.4375, 0.5, 0.375], 0.44999998807907104),
    "multiclass_logits": ([0.3125, 0.1875, 0.125], 0.22499999403953552),
    "multiclass_probs": ([0.3125, 0.3125, 0.125], 0.2750000059604645),
    "multilabel_probs": ([0.515625, 0.515625, 0.53125], 0.518750011920929),
    "int_labels": ([0.1875, 0.25, 0.25], 0.22499999403953552),
}
#: torchmetrics 0.10.3's auroc(preds, target): without num_classes it took binary inputs only (it raised on the rest)
AUROC_0_10 = {"binary_probs": 0.4426666498184204}


def _tensors(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    preds, target = cases()[name]
    return torch.tensor(preds), torch.tensor(target)


@pytest.mark.parametrize("name", sorted(ACCURACY_0_10))
def test_accuracy_as_0_10_computed_it(name: str) -> None:
    preds, target = _tensors(name)
    assert legacy_accuracy(preds, target).item() == pytest.approx(ACCURACY_0_10[name], rel=1e-6)


@pytest.mark.parametrize("name", sorted(ACCURACY_CLASS_0_10))
def test_the_accuracy_class_per_batch_and_over_the_epoch(name: str) -> None:
    preds, target = _tensors(name)
    metric = LegacyAccuracy()
    batches = [metric(preds[i : i + 16], target[i : i + 16]).item() for i in range(0, len(preds), 16)]
    expected_batches, expected_epoch = ACCURACY_CLASS_0_10[name]
    assert batches == pytest.approx(expected_batches, rel=1e-6)
    assert metric.compute().item() == pytest.approx(expected_epoch, rel=1e-6)


def test_auroc_as_0_10_computed_it_and_its_refusals() -> None:
    preds, target = _tensors("binary_probs")
    assert legacy_auroc(preds, target).item() == pytest.approx(AUROC_0_10["binary_probs"], rel=1e-6)
    # Logits: binary_auroc's sigmoid keeps their order, so the AUROC of the raw scores.
    assert legacy_auroc(torch.logit(preds.clamp(1e-4, 1 - 1e-4)), target).item() == pytest.approx(
        AUROC_0_10["binary_probs"], rel=1e-5
    )
    with pytest.raises(ValueError, match=r"not binary \(N,\) and \(N,\): pass task="):
        legacy_auroc(*_tensors("multiclass_probs"))


def test_inputs_0_10_could_not_read_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="neither of one shape nor"):
        legacy_accuracy(torch.rand(4, 3), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="target must hold integer labels"):
        legacy_accuracy(torch.rand(4), torch.rand(4))
