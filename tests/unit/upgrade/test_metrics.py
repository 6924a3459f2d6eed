"""``lightning_mgpu.upgrade.metrics`` (rule ``metrics-num-classes``): torchmetrics' ``task=`` where the file names the
class count; the ``metrics-task`` TODO where it does not, or where the metric is a probability curve."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded

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


def test_the_class_count_comes_from_the_function_the_class_or_the_module() -> None:
    lines = [line.strip() for line in upgraded(MODULE).splitlines()]
    for expected in (
        'self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)',  # __init__'s parameter
        'acc = accuracy(preds, y, task="multiclass", num_classes=self.num_classes)',  # the class's attribute
        # another call's num_classes= in the same function; compute_on_step= (gone in 0.11) dropped
        'self.val_f1 = torchmetrics.F1Score(task="multiclass", num_classes=cfg.train.num_classes)',
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
    assert "EARLY = LegacyAccuracy()\n" in out  # N_CLASSES does not exist yet when it runs: the task is inferred
    assert 'METRICS = {"acc": torchmetrics.Accuracy(task="multiclass", num_classes=N_CLASSES),' in out
    assert 'return torchmetrics.Recall(task="multiclass", num_classes=N_CLASSES)' in out
    assert out.count("metrics-task") == 1  # the statement with Accuracy(0.5): a positional threshold


def test_no_count_or_a_curve_gets_the_stand_in_that_infers_the_task() -> None:
    """Where no count is in sight (and for AUROC, often binary per label), the metric becomes its stand-in that reads
    the task off the inputs as torchmetrics 0.10 did (metrics-inferred-task); anything else keeps the TODO."""
    out = upgraded(MODULE)
    assert "metrics-task" not in out
    assert "roc = legacy_auroc(probs, y)" in out and "self.acc = LegacyAccuracy()" in out
    assert "from lightning_mgpu.upgrade.legacy_metrics import LegacyAccuracy, legacy_auroc\n" in out  # one statement
    out = upgraded(
        "import torchmetrics\nfrom torchmetrics.functional import accuracy, auroc\n"
        "a = torchmetrics.Accuracy(top_k=2)\nb = accuracy(p, t, top_k=2)\nc = auroc(p, t, pos_label=1)\n"
        "d = torchmetrics.F1Score()\ne = accuracy(p, t, threshold=0.3)\n"
    )
    assert out.count("TODO(lightning-mgpu:metrics-task)") == 1  # pos_label: not 0.10's default
    assert "d = LegacyF1Score()" in out  # 0.10's micro F1, the task read off the inputs
    assert "e = legacy_accuracy(p, t, threshold=0.3)" in out
    # top_k: the stand-in takes it (0.10's top-k accuracy on multiclass scores)
    assert "a = torchmetrics.LegacyAccuracy(top_k=2)" not in out and "a = LegacyAccuracy(top_k=2)" in out
    assert "b = legacy_accuracy(p, t, top_k=2)" in out


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
    assert "return LegacyAccuracy()" in upgraded(source)  # no count guessed: the task read off the inputs


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
    # No count: the stand-ins run as written (their figures: test_legacy_metrics.py).
    source = upgraded(
        "import torchmetrics\nfrom torchmetrics.functional import accuracy, auroc\n"
        "def build():\n    return torchmetrics.Accuracy()\n"
        "def score(p, t):\n    return accuracy(p, t), auroc(p, t)\n"
    )
    namespace = {}
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    probs, target = torch.tensor([0.9, 0.2, 0.6, 0.4]), torch.tensor([1, 0, 0, 1])
    assert float(namespace["build"]()(probs, target)) == pytest.approx(0.5)  # type: ignore[operator]
    acc, roc = namespace["score"](probs, target)  # type: ignore[operator]
    assert (float(acc), float(roc)) == (pytest.approx(0.5), pytest.approx(0.75))


def test_a_count_another_method_reads_off_a_parameter_counts_where_that_parameter_is_passed() -> None:
    source = (
        "import torchmetrics\n"
        "class Model(LightningModule):\n"
        "    def __init__(self, cfg):\n"
        "        self.acc = torchmetrics.Accuracy()\n"
        "        self.net = self.build_net(cfg)\n"
        "    def build_net(self, cfg):\n"
        "        return timm.create_model(cfg.arch, num_classes=cfg.data.num_classes)\n"
    )
    assert 'self.acc = torchmetrics.Accuracy(task="multiclass", num_classes=cfg.data.num_classes)' in upgraded(source)
    # Passed something else than a name: the method may read another object; the TODO stays.
    assert "LegacyAccuracy()" in upgraded(source.replace("self.build_net(cfg)", "self.build_net(load(cfg))"))
    # A star before it: which parameter cfg lands in is not written.
    assert "LegacyAccuracy()" in upgraded(source.replace("self.build_net(cfg)", "self.build_net(*extra, cfg)"))
    # Passed by keyword, it counts.
    assert "num_classes=cfg.data.num_classes)" in upgraded(source.replace("build_net(cfg)", "build_net(cfg=cfg)"))


def test_a_models_class_count_keyword_counts() -> None:
    source = (
        "import torchmetrics\n"
        "class Video(LightningModule):\n"
        "    def __init__(self, args):\n"
        "        self.acc = torchmetrics.Accuracy()\n"
        "        self.model = create_resnet(input_channel=3, model_num_class=400)\n"
    )
    assert 'torchmetrics.Accuracy(task="multiclass", num_classes=400)' in upgraded(source)


def test_keywords_torchmetrics_0_11_refuses_are_dropped_where_they_say_nothing_more() -> None:
    """multiclass=True, mdmc_average="global", subset_accuracy=False and compute_on_step= go beside
    task="multiclass"; torchmetrics' own old names (F1, 0.6 and before) take their new ones. The result builds."""
    torchmetrics = pytest.importorskip("torchmetrics")
    source = upgraded(
        "from torchmetrics import Accuracy, F1\n"
        "def build(classes):\n"
        "    return (\n"
        "        Accuracy(multiclass=True, num_classes=classes, subset_accuracy=False),\n"
        "        F1(num_classes=classes, mdmc_average='global', compute_on_step=False, average='macro'),\n"
        "    )\n"
    )
    assert "from torchmetrics import Accuracy, F1Score\n" in source
    assert 'Accuracy(task="multiclass", num_classes=classes),' in source
    assert "F1Score(task=\"multiclass\", num_classes=classes, average='macro')," in source
    namespace: dict[str, object] = {}
    exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
    accuracy, f1 = namespace["build"](3)  # type: ignore[operator]
    assert isinstance(accuracy, torchmetrics.Metric) and isinstance(f1, torchmetrics.Metric)


@pytest.mark.parametrize(
    "call",
    [
        "Accuracy(num_classes=2, multiclass=False)",  # 2-class data read as binary: task="binary", not "multiclass"
        "Accuracy(num_classes=4, subset_accuracy=True)",  # exact match over labels
        "Precision(num_classes=4, mdmc_average='samplewise')",  # 0.11's samplewise does not average the samples
        "Accuracy(num_classes=4, multiclass=flag)",
    ],
)
def test_a_keyword_that_decides_the_task_keeps_the_todo(call: str) -> None:
    out = upgraded(f"from torchmetrics import Accuracy, Precision\nm = {call}\n")
    assert "TODO(lightning-mgpu:metrics-task)" in out and f"m = {call}\n" in out


def test_a_users_own_count_keyword_adds_no_second_value() -> None:
    """Only the libraries' keywords (num_classes=, model_num_class=) count: a head built with the user's own num_cls=4
    beside self.num_cls does not make the class undecided."""
    source = (
        "from torchmetrics.functional import accuracy\n"
        "class Classifier(LightningModule):\n"
        "    def __init__(self, num_cls=4):\n"
        "        self.num_cls = num_cls\n"
        "        self.model = Head(num_cls=4, p=0.1)\n"
        "    def training_step(self, batch, i):\n"
        "        return accuracy(self(batch[0]).argmax(1), batch[1])\n"
    )
    assert 'accuracy(self(batch[0]).argmax(1), batch[1], task="multiclass", num_classes=self.num_cls)' in upgraded(
        source
    )


def test_a_task_given_by_position_is_2x_already() -> None:
    """torchmetrics >= 0.11's own spelling, task first by position (a second held-out real file): left as it is (the
    rewrite added task= beside it and libcst refused the call: an internal-error TODO)."""
    source = (
        "from torchmetrics import Accuracy\nfrom torchmetrics.functional import accuracy\n"
        'a = Accuracy("binary", num_classes=2)\nb = accuracy(p, t, "multiclass", num_classes=3)\n'
    )
    result = upgrade_source(source)
    assert result.source == source and not result.findings


def test_a_task_given_by_position_in_capitals_is_2x_already() -> None:
    """torchmetrics reads the task's name in any case (``ClassificationTask.from_str``): ``Accuracy("MULTICLASS",
    num_classes=n)`` (a reserve file of the third held-out draw) is 2.x already; the tool raised on it before."""
    import torchmetrics

    source = 'from torchmetrics import Accuracy\nacc = Accuracy("MULTICLASS", num_classes=3)\n'
    result = upgrade_source(source)
    assert result.source == source and not result.findings
    assert type(torchmetrics.Accuracy("MULTICLASS", num_classes=3)).__name__ == "MulticlassAccuracy"


def test_a_value_by_position_beside_num_classes_gets_the_todo() -> None:
    """torchmetrics <= 0.10's ``Accuracy(0.5, num_classes=3)`` (the threshold by position): 0.11 takes the task
    first, so task= cannot be added in front; which keyword the value was is for a person (no internal error)."""
    out = upgraded("from torchmetrics import Accuracy\nm = Accuracy(0.5, num_classes=3)\n")
    assert "TODO(lightning-mgpu:metrics-task)" in out and "m = Accuracy(0.5, num_classes=3)\n" in out
    assert "internal-error" not in out


def test_a_renamed_metric_reached_through_the_module_is_renamed_and_converted() -> None:
    """``import torchmetrics`` then ``torchmetrics.F1(...)`` (a notebook of a third held-out sample): F1 is F1Score
    since torchmetrics 0.7, as it is where the name is imported; then its task, as for the name."""
    source = (
        "import torchmetrics\nimport pytorch_lightning as pl\n"
        "class M(pl.LightningModule):\n    def __init__(self):\n        super().__init__()\n"
        "        self.f1 = torchmetrics.F1(num_classes=10)\n"
        "        self.f = torchmetrics.functional.f1(p, t)\n"
    )
    out = upgrade_source(source).source
    assert 'self.f1 = torchmetrics.F1Score(task="multiclass", num_classes=10)' in out
    assert 'torchmetrics.functional.f1_score(p, t, task="multiclass", num_classes=10)' in out
    from lightning_mgpu.upgrade.leftovers import unmarked

    assert upgrade_source(out).source == out and unmarked(out) == []


def test_a_top_k_accuracy_without_a_count_reads_its_task_off_the_inputs() -> None:
    """Accuracy(top_k=5) on a backbone's scores (a real file's shape, the head's size nowhere in the file): the
    stand-in that reads multiclass off the inputs, as 0.10 did, and keeps top_k."""
    out = upgraded(
        "from torchmetrics import Accuracy, MetricCollection\nfrom torchmetrics.functional import accuracy\n"
        "import pytorch_lightning as pl\n"
        "class Net(pl.LightningModule):\n    def __init__(self):\n        super().__init__()\n"
        "        self.scores = MetricCollection({'first': Accuracy(top_k=1), 'five': Accuracy(top_k=5)})\n"
        "def hits(logits, labels):\n    return accuracy(logits, labels, top_k=3)\n",
        no_todo=True,
        no_unmarked=True,
    )
    assert "{'first': LegacyAccuracy(top_k=1), 'five': LegacyAccuracy(top_k=5)}" in out, out
    assert "return legacy_accuracy(logits, labels, top_k=3)" in out


def test_compute_on_step_goes_beside_the_stand_in_that_infers_the_task() -> None:
    """No count in sight and compute_on_step=False (1.x only made forward() return None): the stand-in, which
    accumulates over the updates and computes what 0.10 computed; another legacy keyword still decides the task."""
    torch = pytest.importorskip("torch")
    source = (
        "import pytorch_lightning as pl\n"
        "def scorers():\n"
        "    return [('hits', pl.metrics.Accuracy(compute_on_step=False))]\n"
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert "return [('hits', LegacyAccuracy())]" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "converted", "exec"), namespace)  # noqa: S102
    ((_, hits),) = namespace["scorers"]()  # type: ignore[operator]
    hits(torch.tensor([1, 2, 0]), torch.tensor([1, 2, 2]))  # the value forward gives is not read, as in 1.x
    hits(torch.tensor([0]), torch.tensor([0]))
    assert hits.compute().item() == pytest.approx(0.75)  # 3 of 4 labels over both updates
    kept = upgraded(source.replace("compute_on_step=False", "compute_on_step=False, subset_accuracy=True"))
    assert "TODO(lightning-mgpu:metrics-task)" in kept and "subset_accuracy=True" in kept
