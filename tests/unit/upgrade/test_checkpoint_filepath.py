"""``ModelCheckpoint(filepath=...)`` (Lightning 0.8-1.1): the run-time split
(:func:`lightning_mgpu.upgrade.legacy_checkpoint.legacy_checkpoint_filepath`) against 1.x's, and what the tool writes
(rule ``checkpoint-filepath``, note ``checkpoint-filepath-folder``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libcst", reason="the upgrade tool needs the [upgrade] extra")

from fsspec.core import url_to_fs  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

from lightning_mgpu.upgrade import rules  # noqa: E402
from lightning_mgpu.upgrade.legacy_checkpoint import legacy_checkpoint_filepath  # noqa: E402
from tests.helpers.upgrade_check import upgraded, upgraded_result  # noqa: E402

NOTE = "NOTE(lightning-mgpu:checkpoint-filepath-folder)"


def split_as_1x(filepath: str | None) -> tuple[str | None, str | None]:
    """(dirpath, filename) as 1.1.8's ModelCheckpoint.__init_ckpt_dir set them from ``filepath`` (the same steps as
    0.10.0's), written out here as the reference: a falsy path -> (None, None); an existing folder -> (path, None);
    else os.path.split of the path, made real first on the local file system (1.x compared protocol == "file")."""
    if not filepath:
        return None, None
    fs, _ = url_to_fs(filepath)
    if fs.isdir(filepath):
        return filepath, None
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocol:
        filepath = os.path.realpath(filepath)
    head, tail = os.path.split(filepath)
    return head, tail


def _given(kwargs: dict[str, Any]) -> tuple[str | None, str | None]:
    return kwargs.get("dirpath"), kwargs.get("filename")


@pytest.mark.parametrize(
    "relative",
    [
        "made",  # an existing folder
        "made/",  # the same, spelled with a slash
        "not_made_yet",  # a folder the script makes later: 1.x read it as a file name in the working directory
        "not_made_yet/",  # realpath drops the slash: the same
        "made/{epoch}-{val_loss:.2f}",
        "made/run-{epoch:02d}",
        "best.ckpt",
        "made/best.ckpt",
        "{epoch}",
        "made/../made/{step}",
    ],
)
def test_the_split_is_1xs(relative: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "made").mkdir()
    monkeypatch.chdir(tmp_path)
    for path in (relative, str(tmp_path / relative)):
        assert _given(legacy_checkpoint_filepath(path)) == split_as_1x(path), path


def test_no_path_is_no_argument() -> None:
    assert legacy_checkpoint_filepath("") == {} and legacy_checkpoint_filepath(None) == {}
    assert split_as_1x("") == (None, None)


def test_a_remote_path_is_split_without_being_made_real() -> None:
    assert legacy_checkpoint_filepath("memory://bucket/ckpts/{epoch}") == {
        "dirpath": "memory://bucket/ckpts",
        "filename": "{epoch}",
    }
    assert _given(legacy_checkpoint_filepath("memory://bucket/ckpts/{epoch}")) == split_as_1x(
        "memory://bucket/ckpts/{epoch}"
    )


def test_a_folder_gets_the_default_name_asked_for(tmp_path: Path) -> None:
    assert legacy_checkpoint_filepath(str(tmp_path), default_filename="{epoch}") == {
        "dirpath": str(tmp_path),
        "filename": "{epoch}",
    }
    # a path that is not a folder keeps its own pattern
    assert legacy_checkpoint_filepath(str(tmp_path / "{step}"), default_filename="{epoch}")["filename"] == "{step}"


@pytest.mark.parametrize(
    ("pattern", "metrics", "name"),
    [
        # 1.0.0's own doctests of ModelCheckpoint(filepath).format_checkpoint_name, and the .ckpt it added
        ("{epoch}", {"epoch": 0}, "epoch=0.ckpt"),
        ("{epoch:03d}", {"epoch": 5}, "epoch=005.ckpt"),
        ("{epoch}-{val_loss:.2f}", {"epoch": 2, "val_loss": 0.123456}, "epoch=2-val_loss=0.12.ckpt"),
        ("best.ckpt", {"epoch": 1}, "best.ckpt.ckpt"),
    ],
)
def test_2x_writes_the_names_1x_wrote(pattern: str, metrics: dict[str, Any], name: str, tmp_path: Path) -> None:
    callback = ModelCheckpoint(**legacy_checkpoint_filepath(os.path.join(tmp_path, pattern)))
    assert callback.format_checkpoint_name({"step": 7, **metrics}) == os.path.join(tmp_path, name)


def test_a_folder_keeps_2xs_default_name_unless_told(tmp_path: Path) -> None:
    metrics = {"epoch": 3, "step": 12}
    assert (
        ModelCheckpoint(**legacy_checkpoint_filepath(str(tmp_path)))
        .format_checkpoint_name(metrics)
        .endswith(
            "epoch=3-step=12.ckpt"  # 1.1's default pattern, 2.x's too
        )
    )
    assert ModelCheckpoint(
        **legacy_checkpoint_filepath(str(tmp_path), default_filename="{epoch}")
    ).format_checkpoint_name(metrics) == os.path.join(tmp_path, "epoch=3.ckpt")  # 1.0's


# -- what the tool writes ------------------------------------------------------------------------------------------

FOLDER_FROM_CONFIG = """from pytorch_lightning.callbacks import ModelCheckpoint


def callbacks_for(settings):
    saver = ModelCheckpoint(
        filepath=settings["save_to"],
        save_top_k=2,
        monitor="val_f1",
    )
    return [saver]
"""


def test_a_path_the_tool_cannot_read_is_split_at_run_time() -> None:
    result = upgraded_result(FOLDER_FROM_CONFIG, no_todo=True, no_unmarked=True)
    out = result.source
    assert "from lightning_mgpu.upgrade.legacy_checkpoint import legacy_checkpoint_filepath\n" in out
    assert '        **legacy_checkpoint_filepath(settings["save_to"]),\n        save_top_k=2,\n' in out
    assert f"    # {NOTE}: if a folder: 1.0 wrote epoch=N.ckpt" in out
    assert [f.rule for f in result.changes if f.rule == "checkpoint-filepath"] == ["checkpoint-filepath"]


def test_a_visible_pattern_in_a_variable_gets_no_note() -> None:
    source = (
        "from pytorch_lightning.callbacks import ModelCheckpoint\n"
        "def make(root, tag):\n"
        "    return ModelCheckpoint(filepath=os.path.join(root, tag + '-{epoch:02d}'), prefix='')\n"
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert "    return ModelCheckpoint(**legacy_checkpoint_filepath(os.path.join(root, tag + '-{epoch:02d}')))\n" in out
    assert NOTE not in out and "prefix" not in out  # an empty prefix joined nothing in 1.x: it goes


@pytest.mark.parametrize(
    ("literal", "written"),
    [
        ("'runs/mnist/{epoch}-{val_acc:.3f}'", 'dirpath="runs/mnist", filename="{epoch}-{val_acc:.3f}"'),
        ("'weights-{epoch:02d}'", 'dirpath=".", filename="weights-{epoch:02d}"'),  # 1.x: the working directory
        ("'/data/out/final.ckpt'", 'dirpath="/data/out", filename="final.ckpt"'),  # 1.x wrote final.ckpt.ckpt
        ("'/{epoch}'", 'dirpath="/", filename="{epoch}"'),
    ],
)
def test_a_literal_file_pattern_is_split_here(literal: str, written: str) -> None:
    out = upgraded(f"cb = ModelCheckpoint(filepath={literal}, monitor='loss')\n", no_todo=True, no_unmarked=True)
    assert out == f"cb = ModelCheckpoint({written}, monitor='loss')\n"


def test_a_literal_that_may_be_a_folder_is_split_at_run_time() -> None:
    out = upgraded("cb = ModelCheckpoint(filepath='checkpoints', monitor='loss')\n", no_todo=True, no_unmarked=True)
    assert "cb = ModelCheckpoint(**legacy_checkpoint_filepath('checkpoints'), monitor='loss')\n" in out
    assert NOTE in out


def test_an_empty_literal_goes() -> None:
    assert upgraded("cb = ModelCheckpoint(filepath='', monitor='loss')\n") == "cb = ModelCheckpoint(monitor='loss')\n"


@pytest.mark.parametrize(
    "expression",
    ["where", "f'{where}/fold1'", "os.path.join(where, 'ep{epoch}')", "'tag-{epoch}'", "where + '/last.ckpt'"],
)
def test_the_converted_call_builds_the_callback_1x_built(
    expression: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The converted statement, run on 2.x, against 1.x's split of the same value."""
    (tmp_path / "fold1").mkdir()
    monkeypatch.chdir(tmp_path)
    out = upgraded(
        "import os\nfrom pytorch_lightning.callbacks import ModelCheckpoint\n"
        f"cb = ModelCheckpoint(filepath={expression}, save_top_k=1)\n",
        no_todo=True,
        no_unmarked=True,
    )
    namespace: dict[str, Any] = {"where": str(tmp_path)}
    exec(compile(out, "<converted>", "exec"), namespace)  # noqa: S102 - the tool's own output, built here
    value = eval(expression, {"os": os}, {"where": str(tmp_path)})  # noqa: S307 - a fixture's expression
    dirpath, filename = split_as_1x(value)
    callback = namespace["cb"]
    assert (callback.dirpath, callback.filename) == (os.path.realpath(dirpath), filename)


def test_the_rules_say_what_the_tool_does() -> None:
    assert rules.RULES["checkpoint-filepath"].kind == "rewrite"
    assert rules.RULES["checkpoint-filepath-folder"].kind == "note"
    assert 'default_filename="{epoch}"' in rules.explain("checkpoint-filepath-folder")  # type: ignore[operator]


def test_the_call_keeps_its_layout() -> None:
    source = (
        "first = ModelCheckpoint(\n    monitor='acc',\n    filepath='w/{epoch}'\n)\n"
        "second = ModelCheckpoint(\n    filepath=cfg.where,\n    monitor='acc',\n)\n"
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert 'first = ModelCheckpoint(\n    monitor=\'acc\',\n    dirpath="w",\n    filename="{epoch}"\n)\n' in out
    assert "second = ModelCheckpoint(\n    **legacy_checkpoint_filepath(cfg.where),\n    monitor='acc',\n)\n" in out
