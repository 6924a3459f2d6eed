"""``lightning-mgpu upgrade PATH... [--write]``: files and folders, the diff, the summary, exit codes, and the 1.x
corpus (tests/helpers/upgrade_corpus) converted, idempotent, and each GPU-only script's Trainer built on the CPU."""

from __future__ import annotations

import argparse
import ast
import inspect
import shutil
import types
from pathlib import Path

import pytest

# The [upgrade] extra: an environment without it (a GPU node's own Python) skips these, not errors.
pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.cli import main as cli_main
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.runif import RunIf
from tests.helpers.upgrade_corpus import CPU_RUNNABLE, GPU_ONLY

CORPUS = Path(__file__).resolve().parents[2] / "helpers" / "upgrade_corpus"


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(CORPUS, folder, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    (folder / ".venv" / "lib").mkdir(parents=True)
    (folder / ".venv" / "lib" / "vendored.py").write_text("t = Trainer(gpus=1)\n")  # never walked into
    (folder / "broken.py").write_text("def f(:\n    Trainer(gpus=2)\n")
    return folder


def test_the_default_run_prints_a_diff_and_changes_nothing(scripts: Path, capsys: pytest.CaptureFixture) -> None:
    before = {p: p.read_text() for p in scripts.rglob("*.py")}
    assert cli_main(["upgrade", str(scripts)]) == 0
    out, err = capsys.readouterr()
    assert {p: p.read_text() for p in scripts.rglob("*.py")} == before
    assert (
        f"--- a/{scripts / 'gan_dp.py'}" in out
        and '+    return Trainer(accelerator="gpu", devices=args.gpus, strategy="dp"' in out
    )
    assert "vendored.py" not in out + err
    # The summary: each change and TODO at file:line, the file that does not parse, and the total.
    assert f'{scripts / "gan_dp.py"}:47: distributed_backend="dp" -> strategy="dp"' in err
    assert f"{scripts / 'gan_dp.py'}:24: TODO training_step uses optimizer_idx" in err
    assert f"{scripts / 'seed_guide.py'}:4: note: FairScale's checkpoint_wrapper keeps working" in err
    assert f"{scripts / 'broken.py'}: skipped, does not parse (" in err and "left untouched" in err
    assert "8 of 9 file(s) would change" in err and "1 file(s) skipped; run again with --write to apply" in err


def test_write_applies_and_a_second_run_reports_no_change(scripts: Path, capsys: pytest.CaptureFixture) -> None:
    broken = (scripts / "broken.py").read_text()
    assert cli_main(["upgrade", "--write", str(scripts)]) == 0
    assert 'strategy="dp"' in (scripts / "gan_dp.py").read_text()
    assert (scripts / "broken.py").read_text() == broken  # left untouched
    assert not list(scripts.glob(".*.tmp"))
    capsys.readouterr()
    assert cli_main(["upgrade", "--write", str(scripts)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "0 of 9 file(s) changed (0 rewrite(s))" in err


def test_single_files_and_a_missing_path(scripts: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["upgrade", str(scripts / "ddp2_cpu.py")]) == 0
    assert "1 of 1 file(s) would change" in capsys.readouterr().err
    assert cli_main(["upgrade", str(scripts / "nope.py")]) == 2
    assert "nope.py does not exist: pass .py files or folders" in capsys.readouterr().err


#: What each GPU-only script imports beyond Lightning (the seed guide's Neptune logger and FairScale wrapper).
NEEDS = {"seed_guide.py": RunIf(neptune=True, fairscale=True).marks}


@pytest.mark.parametrize("name", [pytest.param(n, marks=NEEDS.get(n, ()), id=n) for n in sorted(GPU_ONLY)])
def test_gpu_only_scripts_convert_import_and_build_their_trainer_on_the_cpu(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Converted, with accelerator="cpu" substituted, the module imports and its Trainer builds with the strategy it
    named (in this process: building launches nothing)."""
    monkeypatch.setenv("NEPTUNE_MODE", "debug")
    source = upgrade_source((CORPUS / name).read_text()).source
    assert 'accelerator="gpu"' in source
    module = types.ModuleType(name[:-3])
    exec(compile(source.replace('accelerator="gpu"', 'accelerator="cpu"'), name, "exec"), module.__dict__)  # noqa: S102
    given = {"args": argparse.Namespace(gpus=2), "hparams": argparse.Namespace(gpus=2, nodes=1), "resume": None}
    trainer = module.build_trainer(*[given[p] for p in inspect.signature(module.build_trainer).parameters])
    import pytorch_lightning as pl

    assert isinstance(trainer, pl.Trainer)
    registered = pl.strategies.StrategyRegistry[GPU_ONLY[name]]["strategy"]
    assert isinstance(trainer.strategy, registered), (type(trainer.strategy), registered)


@pytest.mark.parametrize("name", sorted({**CPU_RUNNABLE, **GPU_ONLY}))
def test_the_corpus_converts_to_code_without_1x_spellings(name: str) -> None:
    result = upgrade_source((CORPUS / name).read_text())
    compile(result.source, name, "exec")
    tree = ast.parse(result.source)
    keywords = {k.arg for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords}
    removed = {
        "gpus",
        "num_processes",
        "distributed_backend",
        "amp_backend",
        "checkpoint_callback",
        "weights_summary",
        "replace_sampler_ddp",
        "resume_from_checkpoint",
    }
    assert not keywords & removed, keywords & removed
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Trainer",):
            values = [
                k.value.value
                for k in node.keywords
                if k.arg in ("accelerator", "plugins") and isinstance(k.value, ast.Constant)
            ]
            assert not set(values) & {"dp", "ddp", "ddp2", "horovod", "ddp_cpu", "ddp_sharded"}, values
    assert upgrade_source(result.source).source == result.source
