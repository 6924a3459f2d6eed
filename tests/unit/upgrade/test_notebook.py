"""``lightning-mgpu upgrade`` on Jupyter notebooks: code cells converted, IPython's own syntax, markdown, outputs,
execution counts and metadata kept, valid nbformat written, idempotent, a diff per cell, findings per cell, and a
cell that does not parse left alone while the others convert."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")
pytest.importorskip("nbformat", reason="lightning-mgpu upgrade reads notebooks with nbformat ([upgrade])")

import nbformat

from lightning_mgpu.cli import main as cli_main
from lightning_mgpu.upgrade.notebook import (
    mask_ipython,
    metric_imports,
    notebook_context,
    python_file_cell,
    unmask_ipython,
    upgrade_notebook,
)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "helpers" / "upgrade_notebooks"


@pytest.fixture
def colab(tmp_path: Path) -> Path:
    """A Colab-style notebook (2-space JSON, Colab's key order, nbformat 4.0, outputs kept)."""
    path = tmp_path / "colab_mnist.ipynb"
    shutil.copy(NOTEBOOKS / "colab_mnist.ipynb", path)
    return path


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_code_cells_convert_and_everything_else_stays(colab: Path, capsys: pytest.CaptureFixture) -> None:
    before = json.loads(colab.read_text())
    assert cli_main(["upgrade", "--write", str(colab)]) == 0
    err = capsys.readouterr().err
    after = json.loads(colab.read_text())
    nbformat.validate(nbformat.reads(colab.read_text(), as_version=nbformat.NO_CONVERT))
    # Only code cells' sources change: markdown, outputs, execution counts and metadata are as they were.
    assert after["metadata"] == before["metadata"] and len(after["cells"]) == len(before["cells"])
    for old, new in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
        if old["cell_type"] != "code":
            assert old == new
    old_cells, new_cells = before["cells"], after["cells"]
    # IPython's own lines, and whole cells of it, as they were.
    for number in (2, 3, 6, 8, 10):
        assert new_cells[number - 1] == old_cells[number - 1], number
    assert source(new_cells[3]).splitlines()[2] == "from torchmetrics.functional import accuracy"
    assert "def on_validation_epoch_end(self):" in source(new_cells[4])
    timed = source(new_cells[6])
    assert timed.startswith("%%time\n") and timed.endswith("trainer.fit(model, train_loader, val_loader)")
    assert (
        'trainer = pl.Trainer(accelerator="gpu", devices=1, max_epochs=3,'
        " callbacks=[TrackGradNorm(2), TQDMProgressBar(refresh_rate=20)])" in timed.splitlines()
    )
    dp = source(new_cells[10]).splitlines()
    assert dp[2:] == [
        "    !nvidia-smi -L",
        "    gpus = !nvidia-smi -L | wc -l",
        '    trainer = pl.Trainer(accelerator="gpu", devices=2, strategy="dp")',
    ]
    # The cell that does not parse is left as it was and reported at its cell; the others still converted.
    assert new_cells[8] == old_cells[8]
    assert f"{colab}:cell 9: does not parse (line 1: expected ':'); the cell is left as it was" in err
    # Findings carry the cell (counting every cell from 1) and the line in it.
    assert f"{colab}:cell 7:3: track_grad_norm=2 -> callbacks=[TrackGradNorm(2)] [track-grad-norm-callback]" in err
    assert f"{colab}:cell 5:4: self.hparams = ... -> self.save_hyperparameters(...)" in err
    assert "1 of 1 file(s) changed" in err


def test_a_second_run_changes_nothing(colab: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["upgrade", "--write", str(colab)]) == 0
    written = colab.read_bytes()
    capsys.readouterr()
    assert cli_main(["upgrade", str(colab)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "0 of 1 file(s) would change (0 rewrite(s))" in err
    assert upgrade_notebook(written.decode()).text == written.decode()


def test_the_diff_shows_each_changed_cell(colab: Path, capsys: pytest.CaptureFixture) -> None:
    text = colab.read_text()
    assert cli_main(["upgrade", str(colab)]) == 0
    out = capsys.readouterr().out
    assert colab.read_text() == text
    headers = [line for line in out.splitlines() if line.startswith("--- ")]
    assert headers == [f"--- a/{colab} (cell {n})" for n in (4, 5, 7, 11)]
    assert f"+++ b/{colab} (cell 7)" in out
    assert "-trainer = pl.Trainer(gpus=1, max_epochs=3, progress_bar_refresh_rate=20, track_grad_norm=2)\n" in out
    assert '"source"' not in out and "\\n" not in out  # cell code, not JSON


def test_the_files_json_layout_is_kept(colab: Path, tmp_path: Path) -> None:
    # Colab's: 2 spaces, its own key order; only the lines of the changed cells differ.
    before = colab.read_text()
    after = upgrade_notebook(before).text
    assert after == json.dumps(json.loads(after), indent=2, ensure_ascii=False) + "\n"
    assert list(json.loads(after)) == ["nbformat", "nbformat_minor", "metadata", "cells"]
    assert "████" in after  # non-ASCII output kept as it was written
    # Jupyter's own writer (1 space, sorted keys, nbformat 4.5 with cell ids): what it writes is what it would write.
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("Über GPUs"),
        nbformat.v4.new_code_cell('trainer = Trainer(gpus=2, accelerator="ddp")\n%time trainer.fit(model)'),
    ]
    jupyter = nbformat.writes(notebook)
    converted = upgrade_notebook(jupyter).text
    assert converted != jupyter and nbformat.writes(nbformat.reads(converted, as_version=4)) == converted
    assert (
        source(json.loads(converted)["cells"][1])
        == 'trainer = Trainer(accelerator="gpu", devices=2, strategy="ddp")\n%time trainer.fit(model)'
    )


@pytest.mark.parametrize(
    "line",
    [
        "!pip install pytorch-lightning==1.5",
        "%load_ext tensorboard",
        "    %time trainer.fit(model)",
        "files = !ls *.ckpt",
        "best = %timeit -o step()",
        "pl.Trainer?",
        "pl.Trainer.fit??",
        "?Trainer",
        # automagic: IPython runs a line magic or a shell alias written without its %
        "pip install pytorch-lightning==1.5",
        "matplotlib inline",
        "cd ..",
        "load_ext tensorboard",
        "    tensorboard --logdir lightning_logs/",
    ],
)
def test_ipython_lines_are_masked_and_put_back(line: str) -> None:
    cell = f"if True:\n{line}\n    x = 1\n" if line.startswith(" ") else f"{line}\nx = 1"
    masked, originals = mask_ipython(cell)  # type: ignore[misc]
    assert line.strip() not in masked and originals == [line]
    compile(masked, "<cell>", "exec")  # the placeholder is a statement at the line's indentation
    assert unmask_ipython(masked, originals) == cell


def test_a_magics_name_in_a_python_line_stays_python() -> None:
    cell = "ls = [1,\n      2]\ntime\ncat = 3\npip.main(['install', 'x'])\nls - l\n"
    assert mask_ipython(cell) == (cell, [])


def test_an_automagic_line_no_longer_stops_its_cell_converting(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("pip install pytorch-lightning==1.5.10"),
        nbformat.v4.new_code_cell("matplotlib inline\nimport pytorch_lightning as pl\ntrainer = pl.Trainer(gpus=1)"),
    ]
    result = upgrade_notebook(nbformat.writes(notebook))
    assert not result.unparsable and not result.failed
    converted = json.loads(result.text)["cells"]
    assert source(converted[0]) == "pip install pytorch-lightning==1.5.10"
    assert source(converted[1]) == (
        'matplotlib inline\nimport pytorch_lightning as pl\ntrainer = pl.Trainer(accelerator="gpu", devices=1)'
    )
    assert upgrade_notebook(result.text).text == result.text


def test_continued_shell_lines_and_cell_magics() -> None:
    cell = "!pip install a \\\n     b \\\n  c\nimport os"
    masked, originals = mask_ipython(cell)  # type: ignore[misc]
    assert masked.splitlines()[3] == "import os" and len(originals) == 3
    assert unmask_ipython(masked, originals) == cell
    assert mask_ipython("%%bash\necho Trainer(gpus=1)") is None  # not Python: left alone
    assert mask_ipython("%%writefile train.py\nTrainer(gpus=1)") is None
    masked, originals = mask_ipython("%%capture out\nTrainer(gpus=1)")  # type: ignore[misc]
    assert masked.endswith("\nTrainer(gpus=1)") and originals == ["%%capture out"]
    # Python's own % and ? stay Python's.
    assert mask_ipython("x = a % b\ny = '?'\nz = c if d else e") == ("x = a % b\ny = '?'\nz = c if d else e", [])


def test_a_cell_that_writes_a_python_file_converts_as_that_file_and_other_written_files_stay() -> None:
    """Course notebooks keep the LightningModule in ``%%writefile model.py`` (run later with ``!python``): its body is
    a module with its own imports and converts as one; a YAML file written the same way is left as it is."""
    assert python_file_cell("%%writefile -a 'src/m.py'\nx = 1\n") == ("%%writefile -a 'src/m.py'\n", "x = 1\n")
    assert python_file_cell("%%writefile config.yaml\ntrainer:\n  gpus: 1\n") is None
    assert python_file_cell("%%bash\npython m.py\n") is None
    module = (
        "import pytorch_lightning as pl\n\n\n"
        "class M(pl.LightningModule):\n"
        "    def validation_step(self, batch, batch_idx):\n"
        "        return batch.sum()\n\n"
        "    def validation_epoch_end(self, outputs):\n"
        "        self.log('n', float(len(outputs)))\n\n\n"
        "trainer = pl.Trainer(gpus=1)\n"
    )
    yaml = "%%writefile config.yaml\ntrainer:\n  gpus: 1\n  accelerator: ddp\n"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import lightning.pytorch as L"),  # the notebook's own namespace: not the file's
        nbformat.v4.new_code_cell("%%writefile model.py\n" + module),
        nbformat.v4.new_code_cell(yaml),
    ]
    result = upgrade_notebook(nbformat.writes(notebook))
    written, kept = (source(c) for c in json.loads(result.text)["cells"][1:])
    assert written.startswith("%%writefile model.py\n") and kept == yaml
    body = written.split("\n", 1)[1]
    assert "def on_validation_epoch_end(self)" in body and "validation_epoch_end(self, outputs)" not in body
    assert 'pl.Trainer(accelerator="gpu", devices=1)' in body and "lightning.pytorch" not in body
    # Findings count the cell's lines: the file's first line is the cell's second.
    trainer_line = module.count("\n", 0, module.index("trainer =")) + 2
    assert {f.line for f in result.findings if f.rule == "trainer-devices"} == {trainer_line}
    again = upgrade_notebook(result.text)
    assert again.text == result.text


def test_the_namespace_and_its_aliases_come_from_every_cell() -> None:
    assert notebook_context("import lightning.pytorch as L\nfrom lightning import pytorch\n") == (
        "lightning.pytorch",
        {"L": "lightning.pytorch", "pytorch": "lightning.pytorch"},
    )
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import lightning.pytorch as L"),
        nbformat.v4.new_code_cell("t = L.Trainer(progress_bar_refresh_rate=5)\nm = L.metrics.Accuracy(num_classes=3)"),
    ]
    converted = source(json.loads(upgrade_notebook(nbformat.writes(notebook)).text)["cells"][1])
    assert converted.splitlines() == [
        "import torchmetrics",
        "from lightning.pytorch.callbacks import TQDMProgressBar",
        "t = L.Trainer(callbacks=[TQDMProgressBar(refresh_rate=5)])",
        'm = torchmetrics.Accuracy(task="multiclass", num_classes=3)',
    ]


def test_torchmetrics_names_imported_in_another_cell_convert() -> None:
    """``from torchmetrics import Accuracy`` in the first cell, ``Accuracy()`` in a class cell: converted as in one file
    (before, the class cell did not know the name and left it as it was, unmarked)."""
    assert metric_imports(
        ["%pip install torchmetrics\nfrom torchmetrics import Accuracy, F1 as F", "x = (", "import os"]
    ) == [
        "Accuracy",
        "F1",
    ]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import pytorch_lightning as pl\nfrom torchmetrics import Accuracy"),
        nbformat.v4.new_code_cell(
            "class M(pl.LightningModule):\n    def __init__(self, n_classes):\n        super().__init__()\n"
            "        self.acc = Accuracy()\n        self.other = Accuracy()\n\nacc = Accuracy()\n"
        ),
    ]
    converted = source(json.loads(upgrade_notebook(nbformat.writes(notebook)).text)["cells"][1])
    assert 'self.acc = Accuracy(task="multiclass", num_classes=n_classes)' in converted
    assert "acc = LegacyAccuracy()" in converted  # no count at module level: the task read off the inputs


def test_folders_hold_notebooks_and_a_broken_one_is_not_the_tools_failure(
    colab: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / ".ipynb_checkpoints").mkdir()
    shutil.copy(colab, tmp_path / ".ipynb_checkpoints" / "colab_mnist-checkpoint.ipynb")  # Jupyter's autosave
    (tmp_path / "half.ipynb").write_text('{"cells": [')
    (tmp_path / "v3.ipynb").write_text('{"nbformat": 3, "worksheets": []}')
    assert cli_main(["upgrade", "--jobs", "1", str(tmp_path)]) == 0  # in-process (the unit tier)
    out, err = capsys.readouterr()
    assert "checkpoint" not in out + err and f"--- a/{colab} (cell 4)" in out
    assert f"{tmp_path / 'half.ipynb'}: skipped, is not a notebook this tool reads (not JSON" in err
    assert f"{tmp_path / 'v3.ipynb'}: skipped, is not a notebook this tool reads (not an nbformat 4" in err
    assert (
        "1 of 3 file(s) would change" in err and "2 file(s) that do not parse skipped, 0 file(s) the tool failed" in err
    )


def test_without_nbformat_the_run_names_the_extra(
    colab: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "nbformat", None)  # import nbformat raises ImportError
    assert cli_main(["upgrade", str(colab)]) == 2
    err = capsys.readouterr().err
    assert "needs `nbformat`" in err and "upgrade" in err.split("extra", 1)[1]


def test_a_cell_magic_stays_the_cells_first_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TODO for the whole cell goes above its first statement: under ``%%time`` that is below the magic."""
    from lightning_mgpu.upgrade import imports

    def broken(ctx, original, updated):
        raise ValueError("imports")

    monkeypatch.setattr(imports, "import_bundle", broken)  # a failure the file's header gets a TODO for
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell('%%time\nt = Trainer(accelerator="dp")')]
    cell = source(json.loads(upgrade_notebook(nbformat.writes(notebook)).text)["cells"][0])
    lines = cell.splitlines()
    assert lines[0] == "%%time" and "internal-error" in lines[1] and lines[2] == 't = Trainer(strategy="dp")'


def test_a_cell_the_tool_fails_on_is_left_and_the_others_convert(
    colab: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightning_mgpu.upgrade.notebook as notebook_module

    real = notebook_module.upgrade_source

    def flaky(source: str, **kwargs):
        if "class LitMNIST" in source:
            raise RecursionError("deep")
        return real(source, **kwargs)

    monkeypatch.setattr(notebook_module, "upgrade_source", flaky)
    before = cells(colab)
    assert cli_main(["upgrade", "--write", str(colab)]) == 0
    err = capsys.readouterr().err
    after = cells(colab)
    assert after[4] == before[4] and after[6] != before[6]  # the class's cell as it was; the Trainer's converted
    assert f"{colab}:cell 5: the tool failed on it (RecursionError: deep; please report it)" in err
    assert "0 file(s) the tool failed on (and 1 notebook cell(s))" in err


def test_a_name_an_earlier_cell_imports_and_the_tool_renames_is_renamed_where_a_later_cell_uses_it() -> None:
    """``from pytorch_lightning.plugins import DDPPlugin`` in the imports cell becomes ``DDPStrategy``; a later cell's
    ``DDPPlugin(...)`` follows (before, it was left as it was: a NameError once the import was renamed)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "from pytorch_lightning import Trainer\nfrom pytorch_lightning.plugins import DDPPlugin, DDPSpawnPlugin"
        ),
        nbformat.v4.new_markdown_cell("Two GPUs, no unused parameters."),
        nbformat.v4.new_code_cell(
            "spawn = DDPSpawnPlugin()\n"
            "trainer = Trainer(gpus=2, plugins=DDPPlugin(find_unused_parameters=False))\n"
            "later = DDPPlugin"
        ),
    ]
    once = upgrade_notebook(nbformat.writes(notebook)).text
    converted = [source(cell) for cell in json.loads(once)["cells"]]
    assert "from pytorch_lightning.strategies import DDPStrategy" in converted[0]
    assert converted[2].splitlines() == [
        'spawn = DDPStrategy(start_method="spawn")',
        'trainer = Trainer(accelerator="gpu", devices=2, strategy=DDPStrategy(find_unused_parameters=False))',
        "later = DDPStrategy",
    ]
    assert upgrade_notebook(once).text == once


def _cells(*sources: str) -> list[str]:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(text) for text in sources]
    return [source(cell) for cell in json.loads(upgrade_notebook(nbformat.writes(notebook)).text)["cells"]]


def test_a_tuner_flag_no_cell_could_run_is_dropped_across_cells() -> None:
    """A trainer built with auto_lr_find in one cell and only asked trainer.tuner.lr_find(...) in the next (a real
    notebook's shape): 1.x ran that finder whatever the flag said, and no cell calls tune(): the flag goes."""
    cells = _cells(
        "import pytorch_lightning as pl",
        "lr_trainer = pl.Trainer(auto_lr_find=True, max_epochs=3)",
        "found = lr_trainer.tuner.lr_find(net)\n%matplotlib inline\nfound.plot()",
    )
    assert cells[1].splitlines()[-1] == "lr_trainer = pl.Trainer(max_epochs=3)" and "TODO" not in cells[1], cells[1]
    assert "found = Tuner(lr_trainer).lr_find(net, update_attr=False)" in cells[2]


@pytest.mark.parametrize(
    "later",
    [
        "lr_trainer.tune(net)",  # a later cell tunes it
        "keep(lr_trainer)",  # handed on
        "x = (",  # a cell that does not parse: it may tune it
    ],
)
def test_a_tuner_flag_another_cell_may_run_keeps_its_todo(later: str) -> None:
    cells = _cells("import pytorch_lightning as pl", "lr_trainer = pl.Trainer(auto_lr_find=True)", later)
    assert "TODO(lightning-mgpu:trainer-auto-lr-find)" in cells[1], cells[1]


def test_a_subpackage_an_earlier_cell_imports_under_a_name_of_its_own_converts_in_a_later_cell() -> None:
    """``import pytorch_lightning.callbacks as cbk`` in the first cell, ``cbk.GPUStatsMonitor()`` in another (a real
    notebook's shape): converted as in one file. Before, the later cell did not know the name, and the removed
    callback was left unmarked."""
    from lightning_mgpu.upgrade.leftovers import unmarked
    from lightning_mgpu.upgrade.notebook import submodule_imports

    assert submodule_imports(
        ["!pip install x\nimport pytorch_lightning.callbacks as cbk", "from pytorch_lightning import loggers", "x = ("]
    ) == {"cbk": ("pytorch_lightning", "callbacks"), "loggers": ("pytorch_lightning", "loggers")}
    first, second, third = _cells(
        "import pytorch_lightning as pl\nimport pytorch_lightning.callbacks as cbk\n"
        "from pytorch_lightning import loggers",
        "trainer = pl.Trainer(max_epochs=2, callbacks=[cbk.EarlyStopping('val'), cbk.GPUStatsMonitor()])",
        "board = loggers.TestTubeLogger('runs')",
    )
    assert "GPUStatsMonitor" not in second and "GPUUtilizationMonitor()" in second, second
    assert "TestTubeLogger" not in third and "TensorBoardLogger(" in third, third
    assert unmarked("\n".join((first, second, third))) == []
    assert _cells(first, second, third) == [first, second, third]  # a second run changes nothing
