"""torchmetrics <= 0.10's classification metrics that infer their task from the inputs, for converted 1.x scripts.

Since torchmetrics 0.11 a classification metric needs ``task=`` (``Accuracy()`` raises). 1.x code wrote
``Accuracy()``, ``accuracy(preds, target)`` or ``auroc(preds, target)`` and torchmetrics read binary, multiclass or
multilabel off the inputs' shapes. Where the file does not say how many classes there are (``metrics.py`` reads that
when it can), ``lightning-mgpu upgrade`` writes these instead (rule ``metrics-inferred-task``); they read the inputs
as torchmetrics 0.10.3 did and compute what it computed (checked against figures 0.10.3 produced:
``tests/unit/upgrade/test_legacy_metrics.py``):

- **accuracy** (0.10's defaults: ``average="micro"``, ``threshold=0.5``, ``subset_accuracy=False``): the share of
  correct labels. Multiclass (``preds`` of shape ``(N, C, ...)`` beside ``target`` ``(N, ...)``): the arg-max
  label; float ``preds`` of ``target``'s shape (binary, multilabel): ``preds >= threshold``; integer ``preds``:
  as they are. Every element of ``target`` counts once. With ``top_k=k`` (multiclass float ``preds`` only, as 0.10
  required: ``k`` below the class count ``C``) a label is right where it is among the ``k`` highest scores.
- **precision, recall, F1** (0.10's defaults: ``average="micro"``, ``threshold=0.5``, no ``mdmc_average``): counts
  of true positives, false positives and false negatives summed over every label. 1-D float ``preds`` (binary) and
  float ``preds`` of ``target``'s shape (multilabel): ``preds >= threshold`` against ``target == 1``, each position
  a label (binary: the positive class's precision). 1-D integer ``preds`` and ``(N, C)`` scores beside ``(N,)``
  labels (multiclass, the arg-max): each sample counts once, so the three equal the accuracy. Multi-dimensional
  multi-class inputs needed ``mdmc_average=`` in 0.10 and are refused, as it refused them. Size-1 dimensions are
  squeezed first, as 0.10 did. F1 is ``2 p r / (p + r)`` of the summed counts; a zero denominator gives 0.
- **AUROC**: without ``num_classes`` 0.10 took binary inputs only (1-D scores, 0/1 targets): torchmetrics'
  ``binary_auroc``.

Pass ``task=`` (and ``num_classes=``) to torchmetrics' own metric to fix the task instead; these exist so that a
converted script computes what it computed before.
"""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.functional.classification import binary_auroc


def accuracy_counts(
    preds: torch.Tensor, target: torch.Tensor, threshold: float = 0.5, top_k: int | None = None
) -> tuple[torch.Tensor, int]:
    """``(correct, total)`` of one batch, read as torchmetrics 0.10's ``accuracy`` read it (module docstring).

    Args:
        preds: scores or labels.
        target: integer labels.
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).
        top_k: a multiclass label is right where it is among the ``top_k`` highest scores (None: the arg-max).

    Returns:
        The number of right labels and the number of labels.

    Raises:
        ValueError: shapes 0.10 refused too (neither equal nor ``preds`` one dimension more), a float ``target``, or
            a ``top_k`` 0.10 refused (not multiclass float scores, not below the class count); multilabel scores with
            ``top_k`` (0.10 marked each sample's ``k`` highest labels: pass ``task="multilabel"`` and ``top_k``).
    """
    if target.is_floating_point():
        raise ValueError(f"accuracy: target must hold integer labels, got {target.dtype}: pass target.long()")
    multiclass = preds.ndim == target.ndim + 1 and preds.shape[:1] + preds.shape[2:] == target.shape
    if top_k is not None:
        # 0.10's _check_top_k: only multiclass probabilities or logits, and fewer than the C scores of a sample.
        if not multiclass or not preds.is_floating_point():
            raise ValueError(
                f"accuracy: top_k={top_k} needs multiclass float scores (N, C, ...) beside labels (N, ...), got preds"
                f" {tuple(preds.shape)} {preds.dtype} and target {tuple(target.shape)}: pass task= to torchmetrics'"
                " Accuracy"
            )
        if not isinstance(top_k, int) or not 0 < top_k < preds.shape[1]:
            raise ValueError(f"accuracy: top_k={top_k!r} must be an integer from 1 to C - 1 = {preds.shape[1] - 1}")
        # 0.10 marked each sample's top_k highest scores and counted a true positive where the label is marked
        # (tp / (tp + fn), every label once): the label is among the top_k indices along the class dimension.
        hits = (preds.topk(top_k, dim=1).indices == target.unsqueeze(1)).any(dim=1)
        return hits.sum(), target.numel()
    if multiclass:
        labels = preds.argmax(dim=1)
    elif preds.shape == target.shape:
        labels = (preds >= threshold).to(target.dtype) if preds.is_floating_point() else preds
    else:
        raise ValueError(
            f"accuracy: preds {tuple(preds.shape)} and target {tuple(target.shape)} are neither of one shape nor"
            " (N, C, ...) beside (N, ...): pass task= to torchmetrics' Accuracy"
        )
    return (labels == target).sum(), target.numel()


def legacy_accuracy(
    preds: torch.Tensor, target: torch.Tensor, threshold: float = 0.5, top_k: int | None = None
) -> torch.Tensor:
    """torchmetrics 0.10's ``accuracy(preds, target)``: the task read off the inputs (module docstring).

    Args:
        preds: scores or labels.
        target: integer labels.
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).
        top_k: a multiclass label is right where it is among the ``top_k`` highest scores (None: the arg-max).

    Returns:
        The share of right labels (a 0-dimensional float tensor).
    """
    correct, total = accuracy_counts(preds, target, threshold, top_k)
    return correct.float() / total


def stat_counts(
    preds: torch.Tensor, target: torch.Tensor, threshold: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tp, fp, fn)`` of one batch, summed over every label, read as torchmetrics 0.10's micro precision, recall
    and F1 read the inputs (module docstring).

    Args:
        preds: scores or labels.
        target: integer labels (0/1 beside float ``preds`` of its shape).
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).

    Returns:
        The true positives, false positives and false negatives (0-dimensional integer tensors).

    Raises:
        ValueError: inputs 0.10 refused too: shapes that are neither equal nor ``(N, C)`` beside ``(N,)``, integer
            scores beside labels, a non-binary ``target`` beside float ``preds`` of its shape, and multi-dimensional
            multi-class inputs (0.10 wanted ``mdmc_average=`` for them).
    """
    # 0.10's _input_squeeze: size-1 dimensions go, a batch of one keeps its batch dimension.
    if preds.shape[:1] == (1,):
        preds, target = preds.squeeze().unsqueeze(0), target.squeeze().unsqueeze(0)
    else:
        preds, target = preds.squeeze(), target.squeeze()
    if target.is_floating_point():
        raise ValueError(f"target must hold integer labels, got {target.dtype}: pass target.long()")
    scores = preds.is_floating_point()
    if preds.ndim == target.ndim and preds.shape == target.shape:
        if scores:
            # Binary (1-D) or multilabel: each position is a label, 1 where the score reaches the threshold.
            if target.numel() and target.max() > 1:
                raise ValueError("float preds of target's shape need a binary (0/1) target, as 0.10 required")
            predicted, actual = preds >= threshold, target == 1
            return (predicted & actual).sum(), (predicted & ~actual).sum(), (~predicted & actual).sum()
        if preds.ndim == 1:
            labels = preds  # 1-D integer labels: multiclass (0.10 one-hot encoded them, whatever their values)
        else:
            raise ValueError(
                f"integer preds and target of shape {tuple(preds.shape)} are multi-dimensional multi-class: 0.10"
                " wanted mdmc_average= for them; pass task='multiclass' and multidim_average= to torchmetrics' metric"
            )
    elif preds.ndim == target.ndim + 1 and preds.shape[:1] + preds.shape[2:] == target.shape:
        if not scores:
            raise ValueError("preds with one dimension more than target must be float scores, as 0.10 required")
        if preds.ndim != 2:
            raise ValueError(
                f"preds {tuple(preds.shape)} beside target {tuple(target.shape)} are multi-dimensional multi-class:"
                " 0.10 wanted mdmc_average= for them; pass task='multiclass' and multidim_average= to torchmetrics'"
                " metric"
            )
        labels = preds.argmax(dim=1)
    else:
        raise ValueError(
            f"preds {tuple(preds.shape)} and target {tuple(target.shape)} are neither of one shape nor (N, C) beside"
            " (N,): pass task= to torchmetrics' metric"
        )
    # Multiclass: one label per sample; a wrong one is a false positive (its class) and a false negative (the true).
    correct = (labels == target).sum()
    wrong = target.numel() - correct
    return correct, wrong, wrong


def _divide(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """``numerator / denominator`` as floats, 0 where the denominator is 0 (0.10's zero_division)."""
    numerator, denominator = numerator.float(), denominator.float()
    return torch.where(denominator == 0, torch.zeros_like(numerator), numerator / denominator.clamp(min=1e-38))


def micro_scores(tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> dict[str, torch.Tensor]:
    """0.10's micro precision, recall and F1 of summed counts (``"precision"``, ``"recall"``, ``"f1"``)."""
    precision, recall = _divide(tp, tp + fp), _divide(tp, tp + fn)
    both = precision + recall
    f1 = torch.where(both == 0, torch.zeros_like(both), 2 * precision * recall / torch.where(both == 0, 1.0, both))
    return {"precision": precision, "recall": recall, "f1": f1}


def legacy_precision(preds: torch.Tensor, target: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """torchmetrics 0.10's ``precision(preds, target)`` (micro): the task read off the inputs (module docstring).

    Args:
        preds: scores or labels.
        target: integer labels.
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).

    Returns:
        ``tp / (tp + fp)`` over every label (0 where nothing was predicted positive).
    """
    return micro_scores(*stat_counts(preds, target, threshold))["precision"]


def legacy_recall(preds: torch.Tensor, target: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """torchmetrics 0.10's ``recall(preds, target)`` (micro): the task read off the inputs (module docstring).

    Args:
        preds: scores or labels.
        target: integer labels.
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).

    Returns:
        ``tp / (tp + fn)`` over every label (0 where no label is positive).
    """
    return micro_scores(*stat_counts(preds, target, threshold))["recall"]


def legacy_f1_score(preds: torch.Tensor, target: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """torchmetrics 0.10's ``f1_score(preds, target)`` (micro; ``f1`` before 0.7): the task read off the inputs
    (module docstring).

    Args:
        preds: scores or labels.
        target: integer labels.
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).

    Returns:
        ``2 p r / (p + r)`` of the micro precision and recall (0 where both are 0).
    """
    return micro_scores(*stat_counts(preds, target, threshold))["f1"]


def legacy_auroc(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """torchmetrics 0.10's ``auroc(preds, target)``: without ``num_classes`` it took only binary inputs (1-D scores
    and 0/1 targets); torchmetrics' ``binary_auroc`` computes the same (its sigmoid of scores outside [0, 1] keeps
    their order).

    Raises:
        ValueError: any other shape (0.10 refused it too without ``num_classes``).
    """
    if preds.ndim != 1 or preds.shape != target.shape:
        raise ValueError(
            f"auroc: preds {tuple(preds.shape)} and target {tuple(target.shape)} are not binary (N,) and (N,):"
            ' pass task="multiclass" or "multilabel" and the class count to torchmetrics\' auroc'
        )
    return binary_auroc(preds, target)


class LegacyAccuracy(Metric):
    """torchmetrics 0.10's ``Accuracy()`` (micro average): the share of correct labels over every update, the task
    read off each batch's inputs (module docstring). Synchronised across processes like any torchmetrics metric.

    Args:
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).
        top_k: a multiclass label is right where it is among the ``top_k`` highest scores (None: the arg-max).
        kwargs: torchmetrics' ``Metric`` options (``dist_sync_on_step``, ...).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, threshold: float = 0.5, top_k: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        self.top_k = top_k
        # The states are named after the settings: a MetricCollection shares one state between metrics whose states
        # hold equal names and values after their first update (its compute groups), so LegacyAccuracy(top_k=1) and
        # LegacyAccuracy(top_k=5) that happened to count the same first batch alike would be merged for good.
        # Differently named states are never merged. The default settings keep the plain names.
        suffix = "" if top_k is None else f"_top{top_k}"
        if threshold != 0.5:
            suffix += "_at" + str(float(threshold)).replace(".", "_").replace("-", "minus")
        self._correct, self._total = "correct" + suffix, "total" + suffix
        self.add_state(self._correct, default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state(self._total, default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        correct, total = accuracy_counts(preds, target, self.threshold, self.top_k)
        setattr(self, self._correct, getattr(self, self._correct) + correct)
        setattr(self, self._total, getattr(self, self._total) + total)

    def compute(self) -> torch.Tensor:
        return getattr(self, self._correct).float() / getattr(self, self._total)


class _LegacyMicroScore(Metric):
    """The summed ``tp``, ``fp`` and ``fn`` of every update (:func:`stat_counts`), and one score of them."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    #: the key of :func:`micro_scores` this metric computes
    score = ""

    def __init__(self, threshold: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        # As LegacyAccuracy's: states named after the threshold, so a MetricCollection shares them only between
        # metrics that count alike (precision and recall at one threshold may share: their counts are the same).
        suffix = "" if threshold == 0.5 else "_at" + str(float(threshold)).replace(".", "_").replace("-", "minus")
        self._names = tuple(f"{name}{suffix}" for name in ("tp", "fp", "fn"))
        for name in self._names:
            self.add_state(name, default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        for name, count in zip(self._names, stat_counts(preds, target, self.threshold)):
            setattr(self, name, getattr(self, name) + count)

    def compute(self) -> torch.Tensor:
        return micro_scores(*(getattr(self, name) for name in self._names))[self.score]


class LegacyPrecision(_LegacyMicroScore):
    """torchmetrics 0.10's ``Precision()`` (micro average), the task read off each batch's inputs (module
    docstring). Synchronised across processes like any torchmetrics metric.

    Args:
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).
        kwargs: torchmetrics' ``Metric`` options (``dist_sync_on_step``, ...).
    """

    score = "precision"


class LegacyRecall(_LegacyMicroScore):
    """torchmetrics 0.10's ``Recall()`` (micro average), the task read off each batch's inputs (module docstring).

    Args:
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).
        kwargs: torchmetrics' ``Metric`` options (``dist_sync_on_step``, ...).
    """

    score = "recall"


class LegacyF1Score(_LegacyMicroScore):
    """torchmetrics 0.10's ``F1Score()`` (``F1()`` before 0.7; micro average), the task read off each batch's inputs
    (module docstring).

    Args:
        threshold: a float prediction at or above it is label 1 (binary and multilabel inputs).
        kwargs: torchmetrics' ``Metric`` options (``dist_sync_on_step``, ...).
    """

    score = "f1"
