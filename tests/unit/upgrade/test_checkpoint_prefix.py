"""``lightning_mgpu.upgrade.checkpoint_prefix`` (rule ``checkpoint-prefix-moved``): ModelCheckpoint(prefix=P) ->
filename="P-...", and the last checkpoint's name, as 1.0-1.2 wrote them; what cannot be known keeps the
``checkpoint-prefix`` TODO."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.upgrade_check import upgraded_result

SCRIPT = """from pytorch_lightning.callbacks import ModelCheckpoint


def callbacks(args):
    checkpoint_callback = ModelCheckpoint(
        dirpath="model_chp",
        filename="{epoch:02d}-{train_loss:.2f}",
        save_last=True,
        monitor="train_loss",
        prefix="model_"
    )
    plain = ModelCheckpoint(monitor="val_loss", filename="best", prefix="")
    return [checkpoint_callback, plain]
"""


def upgraded(source: str) -> tuple[str, list[str]]:
    result = upgraded_result(source)
    return result.source, [f.rule for f in result.findings]


def test_the_prefix_moves_into_the_names() -> None:
    out, found = upgraded(SCRIPT)
    lines = [line.strip() for line in out.splitlines()]
    assert 'filename="model_-{epoch:02d}-{train_loss:.2f}",' in lines, out
    assert 'monitor="train_loss"' in lines and "prefix" not in out
    assert lines[lines.index('monitor="train_loss"') + 1] == ")"  # the call's closing line stays
    assert 'checkpoint_callback.CHECKPOINT_NAME_LAST = "model_-last"' in lines
    assert 'plain = ModelCheckpoint(monitor="val_loss", filename="best")' in lines
    assert found == ["checkpoint-prefix-moved"] * 2 and "TODO" not in out and unmarked(out) == []


def test_the_names_are_the_ones_1x_wrote() -> None:
    """1.x formatted the filename, then joined the prefix with "-": "model_-epoch=03-train_loss=0.50.ckpt", and
    "model_-last.ckpt" with save_last."""
    pytest.importorskip("pytorch_lightning")
    out, _ = upgraded(SCRIPT)
    namespace: dict[str, object] = {}
    exec(compile(out, "<upgraded>", "exec"), namespace)  # noqa: S102
    checkpoint, _ = namespace["callbacks"](None)  # type: ignore[operator]
    metrics = {"epoch": 3, "train_loss": 0.5}
    assert checkpoint.format_checkpoint_name(metrics).endswith("model_chp/model_-epoch=03-train_loss=0.50.ckpt")
    assert checkpoint.format_checkpoint_name(metrics, checkpoint.CHECKPOINT_NAME_LAST).endswith("model_-last.ckpt")


@pytest.mark.parametrize(
    "call",
    [
        'ModelCheckpoint(prefix="run", monitor="x")',  # no filename: 1.0-1.1 and 1.2 named it differently
        'ModelCheckpoint(prefix=args.name, filename="{epoch}")',  # a prefix this tool cannot read
        'ModelCheckpoint(prefix="{x}", filename="{epoch}")',  # 1.x never formatted the prefix
        'ModelCheckpoint(prefix="p", filename=pattern)',
    ],
)
def test_what_cannot_be_known_keeps_the_todo(call: str) -> None:
    out, found = upgraded(f"from pytorch_lightning.callbacks import ModelCheckpoint\nck = {call}\n")
    assert "TODO(lightning-mgpu:checkpoint-prefix)" in out and "checkpoint-prefix-moved" not in found


def test_save_last_needs_a_name_to_set_the_last_checkpoints_name() -> None:
    source = "cbs = [ModelCheckpoint(prefix='p', filename='{epoch}', save_last=True)]\n"
    out, _ = upgraded("from pytorch_lightning.callbacks import ModelCheckpoint\n" + source)
    assert "TODO(lightning-mgpu:checkpoint-prefix)" in out
    out, _ = upgraded(source.replace("save_last=True", "save_last=False"))
    assert 'ModelCheckpoint(filename="p-{epoch}", save_last=False)' in out and "TODO" not in out
