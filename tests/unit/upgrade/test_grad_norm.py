"""Trainer(track_grad_norm=p) -> the bundle's TrackGradNorm(p) callback (rule ``track-grad-norm-callback``), in every
file: with the one LightningModule in it too (a hook logging 2.x's grad_norm would log on step only, for every
optimizer, past the module's log_grad_norm)."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded

SCRIPT = """import pytorch_lightning as pl
import torch


class LitModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def build():
    return pl.Trainer(track_grad_norm=2, max_epochs=1)
"""


def test_a_file_with_its_one_module_gets_the_callback_too() -> None:
    out = upgraded(SCRIPT, no_todo=True, no_unmarked=True)
    assert "return pl.Trainer(callbacks=[TrackGradNorm(2)], max_epochs=1)" in out, out
    assert "on_before_optimizer_step" not in out and "import grad_norm" not in out, out


@pytest.mark.parametrize(
    ("source", "callback"),
    [
        (SCRIPT.replace("track_grad_norm=2", "track_grad_norm=args.norm"), "args.norm"),  # a value read at run time
        (SCRIPT + "\n\nclass Other(pl.LightningModule):\n    pass\n", "2"),  # two modules
        (
            SCRIPT.replace(
                "    def configure_optimizers",
                "    def on_before_optimizer_step(self, o):\n        pass\n\n    def configure_optimizers",
            ),
            "2",
        ),  # the hook is there already
    ],
)
def test_every_shape_gets_the_callback(source: str, callback: str) -> None:
    """A value read at run time, two modules, a hook of the module's own: the same callback, in the flag's place."""
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert f"return pl.Trainer(callbacks=[TrackGradNorm({callback})], max_epochs=1)" in out, out  # in its place
    assert "from lightning_mgpu.pl.callbacks import TrackGradNorm" in out and "grad_norm(self, norm_type" not in out


@pytest.mark.parametrize(
    "call",
    [
        "pl.Trainer(track_grad_norm=0)",  # 1.x refused it (a positive number or "inf")
        "pl.Trainer(track_grad_norm=2, callbacks=make_callbacks())",  # callbacks= the tool cannot extend
    ],
)
def test_where_no_callback_can_be_written_the_todo_stays(call: str) -> None:
    out = upgraded(f"import pytorch_lightning as pl\ndef build(make_callbacks):\n    return {call}\n")
    assert "trainer-track-grad-norm): track_grad_norm is gone" in out and "import TrackGradNorm" not in out


def test_minus_one_was_off_and_goes() -> None:
    out = upgraded("import pytorch_lightning as pl\ntrainer = pl.Trainer(track_grad_norm=-1, max_epochs=1)\n")
    assert "trainer = pl.Trainer(max_epochs=1)" in out and "TODO" not in out and "TrackGradNorm" not in out


TRAIN_SCRIPT = """import pytorch_lightning as pl
from modules_elsewhere import Net


def build(root):
    return pl.Trainer(max_steps=3, track_grad_norm="inf", log_every_n_steps=1, default_root_dir=root,
                      logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
"""


def test_the_callback_logs_on_lightning_2(tmp_path) -> None:
    """The module lives in another file (a real script's shape): the converted Trainer logs the inf-norms with 1.x's
    keys, on step and epoch."""
    import sys
    import types

    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    out = upgraded(TRAIN_SCRIPT, no_todo=True, no_unmarked=True)
    assert 'callbacks=[TrackGradNorm("inf")]' in out, out
    elsewhere = types.ModuleType("modules_elsewhere")
    elsewhere.Net = Net  # type: ignore[attr-defined]
    sys.modules["modules_elsewhere"] = elsewhere
    try:
        namespace: dict[str, object] = {}
        exec(compile(out, "converted", "exec"), namespace)  # noqa: S102
    finally:
        del sys.modules["modules_elsewhere"]
    trainer = namespace["build"](str(tmp_path))  # type: ignore[operator]
    trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4))
    assert {"grad_inf_norm/layer.weight_step", "grad_inf_norm_total_epoch"} <= set(trainer.callback_metrics)


def test_the_single_module_script_logs_as_1x_on_lightning_2(tmp_path) -> None:
    """The converted single-module script trains on this Lightning and logs the 2-norms under 1.x's keys, on step
    and as the epoch's mean (1.x's log_grad_norm: on_step=True, on_epoch=True), and through the module's own
    log_grad_norm where it defines one."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(SCRIPT, no_todo=True, no_unmarked=True)
    seen: list[dict] = []
    own = out.replace(
        "    def configure_optimizers",
        "    def log_grad_norm(self, grad_norm_dict):\n        SEEN.append(grad_norm_dict)\n\n"
        "    def configure_optimizers",
    )
    for source, callback_keys in ((out, True), (own, False)):
        namespace: dict[str, object] = {"SEEN": seen}
        exec(compile(source, "converted", "exec"), namespace)  # noqa: S102
        callbacks = namespace["build"]().callbacks  # type: ignore[operator]
        tracker = [c for c in callbacks if type(c).__name__ == "TrackGradNorm"]
        assert len(tracker) == 1
        # The converted module subclasses pytorch_lightning's LightningModule: that distribution's quiet Trainer.
        trainer = quiet_trainer("pytorch_lightning", max_steps=2, default_root_dir=tmp_path, callbacks=tracker)
        trainer.fit(namespace["LitModel"](), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=8))  # type: ignore[operator]
        logged = {"grad_2.0_norm_total_step", "grad_2.0_norm_total_epoch"} <= set(trainer.callback_metrics)
        assert logged is callback_keys
    assert len(seen) == 2 and "grad_2.0_norm_total" in seen[0]
