"""``lightning_mgpu.upgrade.metrics`` (rule ``metrics-num-classes``): torchmetrics' ``task=`` where the file names the
class count; the ``metrics-task`` TODO where it does not, or where the metric is a probability curve."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.transform import upgrade_source

MODULE = """import torchmetrics
from torchmetrics.functional import accuracy, auroc
import pytorch_lightning as pl


class Classifier(pl.LightningModule):
    def __init__(self, num_classes, lr=1e-3):
        super().__init__()
        self.num_classes = num_classes
        self.train_acc = torchmetrics.Accuracy()

    def training_step(self, batch, batch_idx):
        acc = accuracy(preds, y)
        roc = auroc(probs, y)
        return acc


class FromConfig(pl.LightningModule):
    def __init__(self, cfg):
        super().__init__()
        self.net = resnet18(num_classes=cfg.train.num_classes)
        self.val_f1 = torchmetrics.F1Score(compute_on_step=False)


class Unknown(pl.LightningModule):
    def __init__(self, args):
        super().__init__()
        self.acc = torchmetrics.Accuracy()

"""


def upgraded(source: str) -> str:
    result = upgrade_source(source)
    assert upgrade_source(result.source).source == result.source, "a second run changed something"
    return result.source


def test_the_class_count_comes_from_the_function_the_class_or_the_module() -> None:
    lines = [line.strip() for line in upgraded(MODULE).splitlines()]
    for expected in (
        'self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)',  # __init__'s parameter
        'acc = accuracy(preds, y, task="multiclass", num_classes=self.num_classes)',  # the class's attribute
        'self.val_f1 = torchmetrics.F1Score(task="multiclass", num_classes=cfg.train.num_classes,'
        " compute_on_step=False)",  # another call's num_classes= in the same function
    ):
        assert expected in lines, (expected, lines)


def test_a_module_constant_counts_below_its_assignment() -> None:
    source = (
        "import torchmetrics\n"
        "EARLY = torchmetrics.Accuracy()\n"
        "N_CLASSES = 7\n"
        'METRICS = {"acc": torchmetrics.Accuracy(), "thresholded": torchmetrics.Accuracy(0.5)}\n'
        "def build():\n"
        "    return torchmetrics.Recall()\n"
    )
    out = upgraded(source)
    assert "EARLY = torchmetrics.Accuracy()\n" in out  # N_CLASSES does not exist yet when it runs
    assert 'METRICS = {"acc": torchmetrics.Accuracy(task="multiclass", num_classes=N_CLASSES),' in out
    assert 'return torchmetrics.Recall(task="multiclass", num_classes=N_CLASSES)' in out
    assert out.count("metrics-task") == 2  # EARLY, and the statement with Accuracy(0.5)


def test_no_count_or_a_curve_keeps_the_todo() -> None:
    out = upgraded(MODULE)
    todos = [line.strip() for line in out.splitlines() if "metrics-task" in line]
    assert len(todos) == 2, todos  # auroc (a curve), Unknown's Accuracy (no count)
    assert "roc = auroc(probs, y)" in out and "self.acc = torchmetrics.Accuracy()" in out


def test_a_functional_metric_given_num_classes_gets_task() -> None:
    assert upgraded("from torchmetrics.functional import accuracy\na = accuracy(p, t, num_classes=3)\n").endswith(
        'a = accuracy(p, t, task="multiclass", num_classes=3)\n'
    )


def test_two_different_counts_decide_nothing() -> None:
    source = (
        "import torchmetrics\n"
        "def build(num_classes, cfg):\n"
        "    net = resnet(num_classes=cfg.n)\n"
        "    return torchmetrics.Accuracy()\n"
    )
    assert "metrics-task" in upgraded(source)


def test_converted_metrics_build_on_this_torchmetrics() -> None:
    """What the rewrite writes is what torchmetrics >= 0.11 accepts (the unconverted call raises)."""
    torchmetrics = pytest.importorskip("torchmetrics")
    namespace = {"torchmetrics": torchmetrics, "num_classes": 4}
    with pytest.raises((TypeError, ValueError)):
        eval("torchmetrics.Accuracy()", namespace)  # noqa: S307
    source = upgraded("import torchmetrics\ndef build(num_classes):\n    return torchmetrics.Accuracy()\n")
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    metric = namespace["build"](4)  # type: ignore[operator]
    import torch

    assert float(metric(torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 2, 0]))) == pytest.approx(0.75)  # micro
