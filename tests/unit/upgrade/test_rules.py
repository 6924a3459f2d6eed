"""Every change ``lightning-mgpu upgrade`` makes names a rule of the registry, as its TODOs and notes do: the ids
written at the change sites are known, every rule is used somewhere, each is explained, a fixture exercises every
rule that rewrites, and the run's summary counts the findings by rule."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.cli import main as cli_main
from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source

PACKAGE = Path(rules.__file__).parent
CORPUS = Path(__file__).resolve().parents[2] / "helpers" / "upgrade_corpus"

#: One small input per rule that rewrites (the corpus covers many more; these make sure each rule is reached).
REWRITES = {
    "trainer-strategy": 't = Trainer(accelerator="ddp")\n',
    "trainer-devices": "t = Trainer(gpus=2)\n",
    "trainer-precision": "t = Trainer(precision=16)\n",
    "trainer-amp-backend": 't = Trainer(amp_backend="native")\n',
    "trainer-renamed-arg": "t = Trainer(replace_sampler_ddp=False)\n",
    "trainer-early-stop-callback": "t = Trainer(early_stop_callback=True)\n",
    "trainer-reload-dataloaders": "t = Trainer(reload_dataloaders_every_epoch=True)\n",
    "trainer-profiler": "t = Trainer(profiler=True)\n",
    "trainer-max-steps": "t = Trainer(max_steps=None)\n",
    "trainer-loop-kwargs": "trainer.fit(model, train_dataloader=loader)\n",
    "trainer-argparse": "parser = Trainer.add_argparse_args(parser)\n",
    "checkpoint-every-n-epochs": "ck = ModelCheckpoint(period=2)\n",
    "checkpoint-filepath": "ck = ModelCheckpoint(filepath=cfg.out_dir)\n",
    "bundle-import": 't = Trainer(accelerator="dp")\n',
    "bundle-class": "from pytorch_lightning.plugins import DDPShardedPlugin\n",
    "plugin-class": "from pytorch_lightning.plugins import DDPPlugin\np = DDPPlugin()\n",
    "bundle-name": "from pytorch_lightning.loggers import NeptuneLogger\n",
    "trainer-progress-bar-dict": "shown = trainer.progress_bar_dict\n",
    "import-fallback": (
        "try:\n    from pytorch_lightning.strategies import DDPStrategy\nexcept ImportError:\n"
        "    from pytorch_lightning.plugins import DDPPlugin as DDPStrategy\n"
    ),
    "renamed-name": "from pytorch_lightning.loggers import LightningLoggerBase\n",
    "moved-module": "from pytorch_lightning.core.lightning import LightningModule\n",
    "metrics-import": "import pytorch_lightning as pl\nacc = pl.metrics.MeanSquaredError()\n",
    "log-returns": (
        "class M(LightningModule):\n    def training_step(self, batch, i):\n"
        '        return {"loss": batch, "log": {"l": batch}}\n'
    ),
    "result-object-log": (
        "class M(LightningModule):\n    def training_step(self, batch, i):\n"
        "        result = TrainResult(batch)\n        result.log('l', batch)\n        return result\n"
    ),
    "super-removed-hook": (
        "class M(LightningModule):\n    def on_epoch_end(self):\n        return super().on_epoch_end()\n"
    ),
    "renamed-hook": "class C(Callback):\n    def on_epoch_start(self, trainer, pl_module):\n        pass\n",
    "metrics-num-classes": (
        "import torchmetrics\nclass M(LightningModule):\n    def __init__(self, num_classes):\n"
        "        self.num_classes = num_classes\n        self.acc = torchmetrics.Accuracy()\n"
    ),
    "metrics-inferred-task": "import torchmetrics\nacc = torchmetrics.Accuracy()\n",
    "trainer-training-type-plugin": "world = trainer.training_type_plugin.world_size\n",
    "trainer-root-gpu": "gpu = trainer.root_gpu\n",
    "epoch-output-type": (
        "from pytorch_lightning.utilities.types import EPOCH_OUTPUT\ndef f(outputs: EPOCH_OUTPUT) -> None:\n    pass\n"
    ),
    "test-tube-logger-args": (
        "from pytorch_lightning.loggers import TestTubeLogger\nlogger = TestTubeLogger(save_dir='logs')\n"
    ),
    "trainer-conflict-resolved": 't = Trainer(accelerator="ddp", strategy=None)\n',
    "metrics-legacy-args": "from torchmetrics import Accuracy\nacc = Accuracy(num_classes=3, multiclass=True)\n",
    "auto-move-data": "from pytorch_lightning.core.decorators import auto_move_data\n",
    "trainer-splat-translated": "def build(config):\n    return Trainer(**config['trainer'])\n",
    "tuner": "lr_finder = trainer.tuner.lr_find(model)\n",
    "trainer-gpus-beside-accelerator": 't = Trainer(gpus=torch.cuda.device_count(), accelerator="gpu")\n',
    "trainer-args-translated": "t = Trainer(accelerator=args.accelerator, gpus=args.gpus)\n",
    "tuner-flags": "t = Trainer(auto_lr_find=True)\nt.tune(model)\n",
    "tuner-tune-result": 'def f(trainer, model):\n    r = trainer.tune(model)\n    return r["lr_find"]\n',
    "checkpoint-prefix-moved": "ck = ModelCheckpoint(filename='{epoch}', prefix='run1')\n",
    "spawn-isinstance": (
        "from pytorch_lightning.strategies import DDPSpawnStrategy\nx = isinstance(s, DDPSpawnStrategy)\n"
    ),
    "ddp-spawn-isinstance": (
        "from pytorch_lightning.strategies import DDPSpawnStrategy, DDPStrategy\n"
        "x = isinstance(s, (DDPStrategy, DDPSpawnStrategy))\n"
    ),
    "manual-optimization": (
        "import pytorch_lightning as pl\nclass M(pl.LightningModule):\n"
        "    def training_step(self, batch, batch_idx, optimizer_idx):\n        return batch[optimizer_idx]\n"
        "    def configure_optimizers(self):\n        return [self.a, self.b]\n"
    ),
    "track-grad-norm-callback": "import pytorch_lightning as pl\nt = pl.Trainer(track_grad_norm=2)\n",
    "tuner-flags-read": (
        "import pytorch_lightning as pl\ndef f(a, m):\n    trainer = pl.Trainer.from_argparse_args(a)\n"
        "    trainer.tune(m)\n"
    ),
}


def _ids_at_change_sites(text: str, hook_tuples: bool = True) -> set[str]:
    """The rule ids written literally where the tool records a change, a TODO or a note (``hook_tuples``: also the
    ``(method, "rule", message)`` tuples of the transformer's and hooks' tables)."""
    patterns = (
        r"\bctx\.change\(\s*\w+,\s*\"([a-z0-9-]+)\"",  # ctx.change(node, "rule", ...)
        r"\.change\(\s*\"([a-z0-9-]+)\"",  # args.change("rule", ...)
        r"rule=\"([a-z0-9-]+)\"",  # Finding(..., rule="rule")
        r"\(\s*(?:\w+|\"\w+\"),\s*\"([a-z0-9-]+)\",\s*f?[\"']",  # hooks: (method, "rule", message)
        r"(?:todo_text|note_text|\.todo|\.note)\(\s*\"([a-z0-9-]+)\"",  # TODOs and notes
    )
    chosen = patterns if hook_tuples else patterns[:3] + patterns[4:]
    return {rule for pattern in chosen for rule in re.findall(pattern, text)}


def test_every_id_at_a_change_site_is_a_known_rule_and_every_rule_is_used() -> None:
    # The transformer's rule families (each receives the shared context) and hooks.py.
    core = (
        "transform.py",
        "attributes.py",
        "calls.py",
        "classes.py",
        "imports.py",
        "metric_calls.py",
        "statements.py",
        "trainer_call.py",
        "trainer_devices.py",
        "trainer_kwargs.py",
        "trainer_rewrite.py",
        "hooks.py",
    )
    used = _ids_at_change_sites("\n".join((PACKAGE / name).read_text() for name in core))
    # The rule modules beside the transformer (metrics.py, conflicts.py, ...): their calls only.
    others = [path for path in sorted(PACKAGE.glob("*.py")) if path.name not in (*core, "rules.py")]
    used |= _ids_at_change_sites("\n".join(path.read_text() for path in others), hook_tuples=False)
    assert len(used) >= 40, sorted(used)  # the pattern sees the sites (a broken pattern would find none)
    assert used <= set(rules.RULES), sorted(used - set(rules.RULES))
    # Rules named through the tables (dropped and removed Trainer arguments) and the ones every site can reach.
    from lightning_mgpu.upgrade.removed_names import TRAINER_ATTRIBUTES

    tables = set(rules.DROPPED_ARGS.values()) | set(rules.REMOVED_ARGS.values())
    tables |= {rule for _, rule in TRAINER_ATTRIBUTES.values()}
    unused = set(rules.RULES) - used - tables
    assert not unused, f"rules no change site names: {sorted(unused)}"


@pytest.mark.parametrize("rule", sorted(REWRITES))
def test_each_rewrite_rule_is_reached_named_and_explained(rule: str) -> None:
    result = upgrade_source(REWRITES[rule])
    assert rule in {f.rule for f in result.changes}, [(f.rule, f.message) for f in result.findings]
    assert rules.RULES[rule].kind == "rewrite"
    assert rules.explain(rule) == f"{rule} (a rewrite): {rules.RULES[rule].todo}\n\n{rules.RULES[rule].text}"


def test_every_rewrite_rule_has_a_fixture() -> None:
    assert set(REWRITES) == {r.id for r in rules.RULES.values() if r.kind == "rewrite"}


def test_every_finding_over_the_corpus_names_a_known_rule() -> None:
    findings = []
    for script in sorted(CORPUS.glob("*.py")):
        if script.name != "__init__.py":
            findings += upgrade_source(script.read_text()).findings
    assert len(findings) > 100
    unnamed = [(f.line, f.message) for f in findings if f.rule not in rules.RULES]
    assert not unnamed, unnamed
    for finding in findings:  # a TODO's or a note's rule is the one its comment names
        if finding.todo or finding.note:
            assert rules.rule_of(finding.message) == finding.rule
            assert rules.RULES[finding.rule].kind == ("note" if finding.note else "todo")


def test_the_summary_counts_by_rule(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for script in CORPUS.glob("[!_]*.py"):
        shutil.copy(script, tmp_path)
    assert cli_main(["upgrade", "--jobs", "1", str(tmp_path)]) == 0  # in-process (the unit tier)
    err = capsys.readouterr().err
    # Each rewrite line ends in its rule; the counts by rule add up to the total.
    assert re.search(r"gan_dp\.py:47: distributed_backend=\"dp\" -> strategy=\"dp\" \[trainer-strategy\]", err)
    total = int(re.search(r"would change \((\d+) rewrite\(s\)\)", err).group(1))  # type: ignore[union-attr]
    by_rule = re.search(r"^rewrites by rule: (.*)$", err, re.MULTILINE).group(1)  # type: ignore[union-attr]
    counts = dict(item.rsplit(" ", 1) for item in by_rule.split(", "))
    assert sum(int(n) for n in counts.values()) == total and set(counts) <= set(rules.RULES)
    assert "trainer-devices" in counts and "epoch-end" in counts
    todos = re.search(r"^TODOs by rule: (.*)$", err, re.MULTILINE).group(1)  # type: ignore[union-attr]
    assert "optimizer-idx" not in todos and "manual-optimization" in counts  # the GAN became manual optimization
    assert re.search(r"^notes by rule: .*fairscale-checkpoint 1", err, re.MULTILINE)
