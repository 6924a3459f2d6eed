"""``ModelCheckpoint(filepath=X, prefix=P)`` (1.0-1.1) where P is known only at run time:
``**legacy_checkpoint_filepath(X, prefix=P)`` (rule ``checkpoint-prefix-moved``), which puts P in front of the name
as 1.x joined it, checked against 1.1.8's own name formatting."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libcst", reason="the upgrade tool needs the [upgrade] extra")

from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

from lightning_mgpu.upgrade.legacy_checkpoint import legacy_checkpoint_filepath  # noqa: E402
from tests.helpers.upgrade_check import upgraded  # noqa: E402

TODO = "TODO(lightning-mgpu:checkpoint-prefix)"


def name_as_1x(pattern: str | None, metrics: dict[str, Any], prefix: str, default: str = "{epoch}-{step}") -> str:
    """The checkpoint's file name as 1.1.8's ``ModelCheckpoint._format_checkpoint_name`` made it (1.0.0's differs
    only in its default pattern, ``"{epoch}"``, and in dropping an empty prefix by a filter), with ``.ckpt``."""
    filename = pattern or default
    for group in re.findall(r"(\{.*?)[:\}]", filename):
        name = group[1:]
        filename = filename.replace(group, name + "={" + name)
    filename = filename.format(**metrics)
    if prefix:
        filename = "-".join([prefix, filename])  # the prefix as written: never formatted
    return filename + ".ckpt"


METRICS = {"epoch": 3, "step": 120, "val_f1": 0.81234}


@pytest.mark.parametrize(
    ("relative", "prefix", "default"),
    [
        ("made/{epoch}-{val_f1:.2f}", "exp7_", None),  # a pattern: its own name, the prefix in front
        ("made/best", "run", None),  # a file name without a pattern
        ("made", "exp7_", None),  # an existing folder: 1.1's default pattern, prefixed
        ("made", "exp7_", "{epoch}"),  # 1.0's default pattern, asked for
        ("made/{epoch}", "", None),  # an empty prefix joins nothing
    ],
)
def test_the_prefixed_name_is_1xs(relative: str, prefix: str, default: str | None, tmp_path: Path) -> None:
    (tmp_path / "made").mkdir()
    path = str(tmp_path / relative)
    callback = ModelCheckpoint(**legacy_checkpoint_filepath(path, default_filename=default, prefix=prefix))
    pattern = None if relative == "made" else os.path.basename(relative)
    expected = name_as_1x(pattern, dict(METRICS), prefix, default or "{epoch}-{step}")
    assert os.path.basename(callback.format_checkpoint_name(dict(METRICS))) == expected
    assert callback.dirpath == str(tmp_path / "made")


def test_no_path_keeps_the_default_folder_and_prefixes_the_default_name() -> None:
    assert legacy_checkpoint_filepath(None, prefix="exp") == {"filename": "exp-{epoch}-{step}"}
    assert legacy_checkpoint_filepath("", prefix="") == {}


def test_a_prefix_with_braces_is_refused() -> None:
    # 1.x joined it as written; 2.x would format it: no filename gives 1.x's name.
    with pytest.raises(ValueError, match="braces"):
        legacy_checkpoint_filepath("out/{epoch}", prefix="run{3}")


# -- what the tool writes ------------------------------------------------------------------------------------------

RUN_TIME_PREFIX = """\
import os

from pytorch_lightning.callbacks import ModelCheckpoint


def make_saver(settings):
    return ModelCheckpoint(
        filepath=os.path.join(settings.out, "{epoch}"),
        monitor="val_f1",
        prefix=settings.run_name + "_",
    )
"""


def test_a_run_time_prefix_goes_to_the_helper() -> None:
    out = upgraded(RUN_TIME_PREFIX, no_todo=True, no_unmarked=True)
    assert (
        '        **legacy_checkpoint_filepath(os.path.join(settings.out, "{epoch}"), prefix=settings.run_name + "_"),\n'
        '        monitor="val_f1",\n    )\n'
    ) in out
    assert "prefix=settings" not in out.replace("), prefix=settings", "")


def test_a_positional_pattern_with_a_literal_prefix_goes_to_the_helper() -> None:
    source = 'from pytorch_lightning.callbacks import ModelCheckpoint\n\nsaver = ModelCheckpoint("ck/{epoch}", prefix="exp")\n'  # noqa: E501
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert 'ModelCheckpoint(**legacy_checkpoint_filepath("ck/{epoch}", prefix="exp"))' in out


@pytest.mark.parametrize(
    "change",
    [
        ('monitor="val_f1",', 'monitor="val_f1", save_last=True,'),  # "P-last" needs CHECKPOINT_NAME_LAST
        ('prefix=settings.run_name + "_"', 'prefix="run{n}"'),  # braces: no 2.x filename writes 1.x's name
        ('monitor="val_f1",', 'monitor="val_f1", **settings.extra,'),  # a splat may hold save_last
    ],
)
def test_where_the_helper_cannot_keep_the_name_the_todo_stays(change: tuple[str, str]) -> None:
    out = upgraded(RUN_TIME_PREFIX.replace(*change))
    assert TODO in out and "prefix=" in out.split(TODO)[1]
