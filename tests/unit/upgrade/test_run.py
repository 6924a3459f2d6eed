"""``lightning-mgpu upgrade PATH... [--write]``: files and folders, the diff, the summary, exit codes, and the 1.x
corpus (tests/helpers/upgrade_corpus) converted, idempotent, and each GPU-only script's Trainer built on the CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

# The [upgrade] extra: an environment without it (a GPU node's own Python) skips these, not errors.
pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.cli import main as cli_main
from tests.helpers.upgrade_corpus import CORPUS as SCRIPTS

CORPUS = Path(__file__).resolve().parents[2] / "helpers" / "upgrade_corpus"


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(CORPUS, folder, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    (folder / ".venv" / "lib").mkdir(parents=True)
    (folder / ".venv" / "lib" / "vendored.py").write_text("t = Trainer(gpus=1)\n")  # never walked into
    (folder / "broken.py").write_text("def f(:\n    Trainer(gpus=2)\n")
    return folder


# --jobs 1: the unit tier runs in-process; tests/integration/upgrade/test_run.py checks that processes change nothing.
def test_the_default_run_prints_a_diff_and_changes_nothing(scripts: Path, capsys: pytest.CaptureFixture) -> None:
    before = {p: p.read_text() for p in scripts.rglob("*.py")}
    assert cli_main(["upgrade", "--jobs", "1", str(scripts)]) == 0
    out, err = capsys.readouterr()
    assert {p: p.read_text() for p in scripts.rglob("*.py")} == before
    gan = scripts / "gan_dp.py"
    assert f"--- a/{gan}" in out
    assert '+    return Trainer(accelerator="gpu" if args.gpus else "cpu", devices=args.gpus or 1, strategy="dp"' in out
    assert "vendored.py" not in out + err
    # The summary: each change and TODO at file:line, the file that does not parse (at its line), and the total.
    assert f'{gan}:47: distributed_backend="dp" -> strategy="dp"' in err
    assert f"{gan}:14: training_step(..., optimizer_idx) -> manual optimization" in err
    assert f"{scripts / 'seed_guide.py'}:4: NOTE(lightning-mgpu:fairscale-checkpoint): checkpoint_wrapper works" in err
    assert f"{scripts / 'broken.py'}: skipped, does not parse (line 1: " in err and "left untouched" in err
    total = len(SCRIPTS)
    assert f"{total} of {total + 1} file(s) would change" in err
    assert "1 file(s) that do not parse skipped, 0 file(s) the tool failed on; run again with --write to apply" in err
    assert "lightning-mgpu upgrade --explain RULE" in err


def test_write_applies_and_a_second_run_reports_no_change(scripts: Path, capsys: pytest.CaptureFixture) -> None:
    broken = (scripts / "broken.py").read_text()
    assert cli_main(["upgrade", "--write", "--jobs", "1", str(scripts)]) == 0
    assert 'strategy="dp"' in (scripts / "gan_dp.py").read_text()
    assert (scripts / "broken.py").read_text() == broken  # left untouched
    assert not list(scripts.glob(".*.tmp"))
    capsys.readouterr()
    assert cli_main(["upgrade", "--write", "--jobs", "1", str(scripts)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"0 of {len(SCRIPTS) + 1} file(s) changed (0 rewrite(s))" in err


def test_explain_prints_a_rules_full_text(capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["upgrade", "--explain", "epoch-end"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TODO(lightning-mgpu:epoch-end): ") and "self.<step>_outputs" in out
    assert cli_main(["upgrade", "--explain", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no rule 'nope'; the rules: " in err and "epoch-end" in err
    assert cli_main(["upgrade"]) == 2
    assert "name .py or .ipynb files or folders" in capsys.readouterr().err


def test_a_folder_without_python_files_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "notes.txt").write_text("x")
    assert cli_main(["upgrade", str(tmp_path)]) == 2
    assert f"{tmp_path} holds no .py or .ipynb file" in capsys.readouterr().err


def test_a_file_the_tool_cannot_handle_is_skipped_not_fatal(scripts: Path, capsys, monkeypatch) -> None:
    import lightning_mgpu.upgrade.transform as transform

    original = transform.upgrade_source

    def flaky(source: str):
        if "CountingCallback" in source:
            raise RecursionError("deep")
        return original(source)

    monkeypatch.setattr(transform, "upgrade_source", flaky)
    assert cli_main(["upgrade", "--jobs", "1", str(scripts)]) == 0
    err = capsys.readouterr().err
    assert f"{scripts / 'callbacks_1x.py'}: skipped, the tool failed on it (RecursionError: deep" in err
    # Counted apart from the file that does not parse (the file's fault, not the tool's).
    assert "1 file(s) that do not parse skipped, 1 file(s) the tool failed on" in err


def test_single_files_and_a_missing_path(scripts: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["upgrade", str(scripts / "ddp2_cpu.py")]) == 0
    assert "1 of 1 file(s) would change" in capsys.readouterr().err
    assert cli_main(["upgrade", str(scripts / "nope.py")]) == 2
    assert "nope.py does not exist: pass .py or .ipynb files or folders" in capsys.readouterr().err


def test_the_docs_rule_table_is_the_registrys(capsys: pytest.CaptureFixture) -> None:
    from lightning_mgpu.upgrade.rules import RULES, rules_markdown

    docs = (Path(__file__).resolve().parents[3] / "docs" / "upgrade.md").read_text()
    block = docs.split("<!-- rules:start (generated: lightning-mgpu upgrade --rules-markdown) -->\n", 1)[1]
    table = block.split("\n<!-- rules:end -->", 1)[0]
    assert table == rules_markdown(), (
        "docs/upgrade.md's rule table is stale: paste lightning-mgpu upgrade --rules-markdown"
    )
    assert table.count("\n| `") == len(RULES)
    assert cli_main(["upgrade", "--rules-markdown"]) == 0
    assert capsys.readouterr().out == rules_markdown() + "\n"


@pytest.mark.parametrize("namespace", ["lightning.pytorch", "pytorch_lightning"])
def test_every_name_a_rewrite_imports_exists_in_lightning_2(namespace: str) -> None:
    """The 2.x side of every table: a rewrite that imports a name Lightning does not have would break the script."""
    import importlib

    from lightning_mgpu.upgrade import rules

    pytest.importorskip(namespace)
    targets = {(f"{namespace}.{module}", name) for module, name in rules.RENAMED_NAMES.values()}
    targets |= {
        (f"{namespace}.strategies", new) for new, _ in rules.LIGHTNING_PLUGINS.values() if new != "DeepSpeedStrategy"
    }
    targets |= {
        (f"{namespace}.callbacks", n)
        for n in (
            "ModelSummary",
            "TQDMProgressBar",
            "EarlyStopping",
            "ModelCheckpoint",
            "GradientAccumulationScheduler",
        )
    }
    targets |= {
        (f"{namespace}.utilities.memory", "recursive_detach"),
        (f"{namespace}.loggers.logger", "rank_zero_experiment"),
    }
    for below, name in (
        ("utilities.distributed", "rank_zero_only"),
        ("core.lightning", "LightningModule"),
        ("utilities.seed", "seed_everything"),
        ("callbacks.base", "Callback"),
    ):
        target = f"{namespace}.{rules.MOVED_MODULES[below]}".rstrip(".")
        targets.add((target, name))
    targets.add((f"{namespace}.{rules.MOVED_MODULES['profiler']}", "SimpleProfiler"))
    missing = [(m, n) for m, n in sorted(targets) if not hasattr(importlib.import_module(m), n)]
    assert not missing, missing
    assert hasattr(importlib.import_module(f"{namespace}.strategies"), "DeepSpeedStrategy")


def test_jobs_below_one_is_refused_in_one_line(scripts: Path, capsys: pytest.CaptureFixture) -> None:
    before = (scripts / "gan_dp.py").read_text()
    assert cli_main(["upgrade", "--write", "--jobs", "0", str(scripts)]) == 2
    err = capsys.readouterr().err
    assert err == "lightning-mgpu upgrade: error: --jobs 0: pass 1 or more\n"
    assert (scripts / "gan_dp.py").read_text() == before  # refused before any file is touched


PERCENT_SCRIPT = """# %%
%cd ..
!pip install pytorch-lightning==1.5.10
import pytorch_lightning as pl

# %%
trainer = pl.Trainer(gpus=1, max_epochs=3)
files = !ls
if files:
    !echo \\
        continued
"""


def test_a_script_in_ipythons_syntax_converts_with_its_magics_kept(tmp_path: Path, capsys) -> None:
    """A Jupytext/VS Code "percent" script keeps ``%cd`` and ``!pip`` lines, which Python refuses (two real held-out
    files were skipped as "does not parse"): it converts as a notebook cell does, its IPython lines as they were."""
    script = tmp_path / "scratch.py"
    script.write_text(PERCENT_SCRIPT)
    assert cli_main(["upgrade", "--write", "--jobs", "1", str(script)]) == 0
    out = script.read_text()
    assert out == PERCENT_SCRIPT.replace("pl.Trainer(gpus=1,", 'pl.Trainer(accelerator="gpu", devices=1,')
    assert "1 of 1 file(s) changed" in capsys.readouterr().err
    assert cli_main(["upgrade", "--write", "--jobs", "1", str(script)]) == 0  # idempotent
    assert script.read_text() == out
    # Still refused: a file that does not parse once IPython's lines are masked.
    broken = tmp_path / "broken.py"
    broken.write_text("%cd ..\ndef f(:\n    pass\n")
    capsys.readouterr()
    assert cli_main(["upgrade", "--write", "--jobs", "1", str(broken)]) == 0
    assert "skipped, does not parse (line 2: " in capsys.readouterr().err
