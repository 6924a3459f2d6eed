"""The 1.x corpus (tests/helpers/upgrade_corpus) converted in-process: each script's result compiles, is stable under
a second run, leaves exactly the TODOs its entry names, keeps no unmarked 1.x spelling, and builds its Trainer on
Lightning 2.x (the GPU scripts with accelerator="cpu"). The CPU scripts train in tests/integration/upgrade."""

from __future__ import annotations

import argparse
import inspect
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.runif import RunIf
from tests.helpers.upgrade_check import leftovers, unmarked
from tests.helpers.upgrade_corpus import CORPUS

CORPUS_DIR = Path(__file__).resolve().parents[2] / "helpers" / "upgrade_corpus"


def _params(names: list[str]) -> list[pytest.param]:
    return [pytest.param(n, marks=RunIf(**{need: True for need in CORPUS[n].needs}).marks, id=n) for n in names]


def test_the_corpus_is_large_and_in_the_registry() -> None:
    on_disk = {p.name for p in CORPUS_DIR.glob("*.py") if p.name != "__init__.py"}
    assert on_disk == set(CORPUS) and len(CORPUS) >= 20
    assert sum(1 for s in CORPUS.values() if not s.todos) >= 15  # most convert with nothing left for a person


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_script_converts_stably_with_exactly_its_todos(name: str) -> None:
    source = (CORPUS_DIR / name).read_text()
    assert leftovers(source), "a corpus script with nothing to convert tests nothing"
    result = upgrade_source(source)
    compile(result.source, name, "exec")
    again = upgrade_source(result.source)
    assert again.source == result.source and not again.changes, "a second run changed something"
    todo_rules = {
        line.split(rules.TODO_TAG, 1)[1].split(")", 1)[0]
        for line in result.source.splitlines()
        if rules.TODO_TAG in line
    }
    assert todo_rules == set(CORPUS[name].todos), todo_rules
    assert unmarked(result.source) == [], unmarked(result.source)


def test_the_checker_sees_what_it_looks_for() -> None:
    """upgrade_check is independent of the transformer: it must flag the spellings it names, and a TODO marks them."""
    source = (
        "from pytorch_lightning.metrics import Accuracy\n"
        "t = Trainer(gpus=2, accelerator='ddp')\n"
        "class M(pl.LightningModule):\n    def validation_epoch_end(self, outputs):\n        self.hparams = outputs\n"
        "# TODO(lightning-mgpu:x): y\nt2 = Trainer(resume_from_checkpoint=p)\n"
    )
    whats = {what for _, what in unmarked(source)}
    assert whats == {
        "from pytorch_lightning.metrics import ...",
        "Trainer(gpus=...)",
        "accelerator='ddp'",
        "def validation_epoch_end",
        "self.hparams = ...",
    }


def _build_args(function: types.FunctionType, tmp_path: Path) -> list[object]:
    namespace = argparse.Namespace(gpus=2, nodes=1, epochs=1, deepspeed=False)
    config = tmp_path / "config.yaml"
    # 1.x keys the converted script translates when it builds its Trainer (yaml_config.py).
    config.write_text("trainer:\n  max_epochs: 1\n  logger: false\n  gpus: 0\n  checkpoint_callback: false\n")
    given = {"args": namespace, "hparams": namespace, "resume": None, "path": str(config)}
    return [given[p] for p in inspect.signature(function).parameters]


@pytest.mark.parametrize("name", _params(sorted(n for n, s in CORPUS.items() if s.build)))
def test_each_gpu_scripts_trainer_builds_on_lightning_2(name: str, tmp_path: Path, monkeypatch) -> None:
    """Converted, with accelerator "gpu" swapped for "cpu" at build time, every Trainer the script builds constructs
    on this Lightning with the strategy its entry names (building launches nothing)."""
    import pytorch_lightning as pl

    monkeypatch.setenv("NEPTUNE_MODE", "debug")
    real_init = pl.Trainer.__init__

    def on_cpu(self, *args, **kwargs):
        if kwargs.get("accelerator") == "gpu":
            kwargs["accelerator"] = "cpu"
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(pl.Trainer, "__init__", on_cpu)
    source = upgrade_source((CORPUS_DIR / name).read_text()).source
    module = types.ModuleType(name[:-3])
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102
    build = getattr(module, CORPUS[name].build)  # type: ignore[arg-type]
    trainer = build(*_build_args(build, tmp_path))
    assert isinstance(trainer, pl.Trainer)
    assert type(trainer.strategy).__name__ == CORPUS[name].strategy, type(trainer.strategy)


def test_apex_without_precision_16_stays_fp32(monkeypatch) -> None:
    """1.x ignored amp_backend="apex" unless precision=16: the converted Trainer trains in fp32, the other in AMP."""
    source = upgrade_source((CORPUS_DIR / "amp_apex.py").read_text()).source
    assert "trainer-apex" in source and source.count(rules.TODO_TAG) == 1
    namespace: dict[str, object] = {}
    exec(compile(source.replace('"gpu"', '"cpu"'), "amp_apex.py", "exec"), namespace)  # noqa: S102
    args = argparse.Namespace(gpus=1)
    assert namespace["build_fp32_trainer"](args).precision == "32-true"  # type: ignore[operator]
    assert namespace["build_trainer"](args).precision == "bf16-mixed"  # type: ignore[operator]  # 16-mixed, on CPU
