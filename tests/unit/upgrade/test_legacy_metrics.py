"""``lightning_mgpu.upgrade.legacy_metrics``: the stand-ins compute what torchmetrics 0.10.3 computed.

The figures below are torchmetrics 0.10.3's own (``torchmetrics.functional.accuracy``, ``auroc`` and ``Accuracy()``
called without ``num_classes``, on torch 1.13.1), for the inputs :func:`cases` makes with Python's ``random`` (the same
numbers on every torch). Where 0.10.3 raised, the case is left out of that figure.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchmetrics")

from lightning_mgpu.upgrade.legacy_metrics import (  # noqa: E402
    LegacyAccuracy,
    LegacyF1Score,
    LegacyPrecision,
    LegacyRecall,
    legacy_accuracy,
    legacy_auroc,
    legacy_f1_score,
    legacy_precision,
    legacy_recall,
)


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


# -- top_k: 0.10's accuracy(preds, target, top_k=k) on multiclass scores --------------------------------------------


def test_top_k_counts_a_label_among_the_k_highest_scores() -> None:
    """By hand: 0.10 marked each sample's k highest scores and counted tp / (tp + fn), every label once."""
    scores = torch.tensor([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    labels = torch.tensor([2, 1, 0, 0])
    assert legacy_accuracy(scores, labels, top_k=1).item() == pytest.approx(1 / 4)  # only the last one
    assert legacy_accuracy(scores, labels, top_k=2).item() == pytest.approx(3 / 4)  # the third misses
    assert legacy_accuracy(scores, labels, top_k=None).item() == legacy_accuracy(scores, labels, top_k=1).item()


@pytest.mark.parametrize("name", ["multiclass_logits", "multiclass_probs", "multidim_multiclass"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_top_k_is_torchmetrics_micro_multiclass_top_k(name: str, k: int) -> None:
    """What 0.10 computed is torchmetrics' own micro multiclass accuracy with top_k (the 2.x spelling with the class
    count written out), batch by batch and over the epoch."""
    from torchmetrics.classification import MulticlassAccuracy

    preds, target = _tensors(name)
    ours, theirs = LegacyAccuracy(top_k=k), MulticlassAccuracy(num_classes=4, top_k=k, average="micro")
    for i in range(0, len(preds), 16):
        batch = preds[i : i + 16], target[i : i + 16]
        assert ours(*batch).item() == pytest.approx(theirs(*batch).item(), rel=1e-6)
    assert ours.compute().item() == pytest.approx(theirs.compute().item(), rel=1e-6)


def test_top_k_refuses_what_0_10_refused() -> None:
    with pytest.raises(ValueError, match="needs multiclass float scores"):
        legacy_accuracy(*_tensors("binary_probs"), top_k=1)  # 0.10: "can not use top_k with binary data"
    with pytest.raises(ValueError, match="needs multiclass float scores"):
        legacy_accuracy(*_tensors("int_labels"), top_k=1)  # 0.10: "you do not have probability predictions"
    with pytest.raises(ValueError, match="from 1 to C - 1 = 3"):
        legacy_accuracy(*_tensors("multiclass_probs"), top_k=4)  # 0.10: strictly smaller than C


def test_two_top_k_accuracies_in_a_collection_keep_their_own_counts() -> None:
    """A MetricCollection merges metrics whose states are equal after the first update (compute groups): top-1 and
    top-3 that count a first batch alike must still count the next batches apart."""
    from torchmetrics import MetricCollection

    both = MetricCollection({"top1": LegacyAccuracy(top_k=1), "top3": LegacyAccuracy(top_k=3)})
    scores = torch.tensor([[0.9, 0.05, 0.03, 0.02], [0.1, 0.6, 0.2, 0.1]])
    both.update(scores, torch.tensor([0, 1]))  # both right twice: equal counts
    both.update(scores, torch.tensor([2, 3]))  # top-1 wrong twice, top-3 right once (label 2 of the first)
    result = both.compute()
    assert result["top1"].item() == pytest.approx(2 / 4) and result["top3"].item() == pytest.approx(3 / 4)


# -- precision, recall, F1: 0.10's micro average, the task read off the inputs --------------------------------------


def _torchmetrics_2x(name: str, score: str) -> Any:
    """torchmetrics' own metric with the task 0.10 read off ``name``'s inputs written out: what 0.10 computed."""
    from torchmetrics import classification as c

    kind = {"precision": "Precision", "recall": "Recall", "f1": "F1Score"}[score]
    if name == "binary_probs":
        return getattr(c, f"Binary{kind}")(threshold=0.5)
    if name == "multilabel_probs":
        return getattr(c, f"Multilabel{kind}")(num_labels=4, average="micro", threshold=0.5)
    return getattr(c, f"Multiclass{kind}")(num_classes=4, average="micro")


STAND_INS = {"precision": (legacy_precision, LegacyPrecision), "recall": (legacy_recall, LegacyRecall)}
STAND_INS["f1"] = (legacy_f1_score, LegacyF1Score)


@pytest.mark.parametrize("name", ["binary_probs", "multiclass_logits", "multiclass_probs", "multilabel_probs",
                                  "int_labels"])  # fmt: skip
@pytest.mark.parametrize("score", sorted(STAND_INS))
def test_micro_scores_are_those_of_the_task_0_10_read(name: str, score: str) -> None:
    """Batch by batch and over the epoch, each stand-in equals torchmetrics' metric for the task 0.10 read off the
    inputs: binary (the positive class), multilabel (every position a label) or multiclass (micro: the accuracy)."""
    function, cls = STAND_INS[score]
    preds, target = _tensors(name)
    ours, theirs = cls(), _torchmetrics_2x(name, score)
    for i in range(0, len(preds), 16):
        batch = preds[i : i + 16], target[i : i + 16]
        assert ours(*batch).item() == pytest.approx(theirs(*batch).item(), rel=1e-6, abs=1e-7)
        assert function(*batch).item() == pytest.approx(_torchmetrics_2x(name, score)(*batch).item(), abs=1e-7)
    assert ours.compute().item() == pytest.approx(theirs.compute().item(), rel=1e-6)
    if name.startswith("multiclass") or name == "int_labels":
        assert ours.compute().item() == pytest.approx(legacy_accuracy(preds, target).item(), rel=1e-6)


def test_0_10_read_1d_integer_labels_as_multiclass_even_when_they_are_0_and_1() -> None:
    """By hand: 0.10's case for 1-D integer preds is multiclass (one-hot), so 0/1 labels give the accuracy, not the
    positive class's precision; 1-D float scores are binary."""
    preds, target = torch.tensor([0, 1, 1, 1]), torch.tensor([0, 1, 0, 0])
    assert legacy_precision(preds, target).item() == pytest.approx(2 / 4)  # accuracy; binary would say 1/3
    assert legacy_precision(preds.float(), target).item() == pytest.approx(1 / 3)  # binary: tp 1, fp 2
    assert legacy_recall(preds.float(), target).item() == pytest.approx(1.0)
    assert legacy_f1_score(preds.float(), target).item() == pytest.approx(2 * (1 / 3) / (1 / 3 + 1))
    # Nothing predicted positive: 0.10's zero_division gave 0, for F1 too.
    nothing = torch.zeros(4)
    assert legacy_precision(nothing, target).item() == 0.0 and legacy_f1_score(nothing, target).item() == 0.0
    # Size-1 dimensions squeezed first, as 0.10's _input_squeeze did: (N, 1) scores are binary.
    assert legacy_precision(preds.float()[:, None], target[:, None]).item() == pytest.approx(1 / 3)


def test_micro_scores_refuse_what_0_10_refused() -> None:
    with pytest.raises(ValueError, match="mdmc_average="):
        legacy_precision(*_tensors("int_binary_2d"))
    with pytest.raises(ValueError, match="mdmc_average="):
        legacy_recall(*_tensors("multidim_multiclass"))
    with pytest.raises(ValueError, match="must be float scores"):
        legacy_f1_score(torch.ones(4, 3, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="binary"):
        legacy_precision(torch.rand(4), torch.tensor([0, 2, 1, 0]))


def test_precision_and_recall_in_a_collection_share_their_counts_and_differ_in_score() -> None:
    from torchmetrics import MetricCollection

    both = MetricCollection({"p": LegacyPrecision(), "r": LegacyRecall(), "p3": LegacyPrecision(threshold=0.3)})
    scores, labels = torch.tensor([0.9, 0.4, 0.2, 0.35]), torch.tensor([1, 1, 0, 0])
    for _ in range(2):
        both.update(scores, labels)
    result = both.compute()
    assert result["p"].item() == pytest.approx(1.0) and result["r"].item() == pytest.approx(0.5)
    assert result["p3"].item() == pytest.approx(2 / 3)  # 0.9, 0.4, 0.35 predicted positive: two right
