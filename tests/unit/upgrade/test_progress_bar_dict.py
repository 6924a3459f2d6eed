"""Rule ``progress-bar-dict``: a LightningModule's 1.x ``get_progress_bar_dict`` override, kept, with
:mod:`lightning_mgpu.upgrade.progress_bar_dict`'s ``LegacyProgressBarDict`` as the class's last base, so that the
progress bar shows what it returns (with the ``prog_bar`` metrics over it) and its ``super()`` call gives 1.x's
default. The converted modules run here under a real Lightning 2.x Trainer on CPU, in-process, with the TQDM bar."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.progress_bar_dict import LegacyProgressBarDict
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded

#: A module whose override drops the version and adds an entry of its own, and records each training loss.
TALLY = textwrap.dedent(
    """\
    import torch
    import pytorch_lightning as pl


    class Tally(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.losses = []
            self.stages = []

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.losses.append(loss.item())
            self.log("sq", loss, prog_bar=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_sq", self.layer(batch[0]).pow(2).mean(), prog_bar=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

        def get_progress_bar_dict(self):
            # hide the version number, show the batches seen
            items = super().get_progress_bar_dict()
            items.pop("v_num", None)
            items["seen"] = len(self.losses)
            return items
    """
)

#: The same, with a setup of its own that does not call super().setup(stage).
TALLY_SETUP = TALLY.replace(
    "    def configure_optimizers(self):",
    "    def setup(self, stage):\n        self.stages.append(stage)\n\n    def configure_optimizers(self):",
)

#: A module without the override: nothing of the rule applies.
PLAIN = TALLY[: TALLY.index("    def get_progress_bar_dict")].replace("class Tally", "class Plain")


def _module(source: str, name: str):
    namespace: dict[str, object] = {}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102
    return namespace[name]()


def _loader(batches: int = 4):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(batches * 2, 3, generator=generator)), batch_size=2)


def _trainer(tmp_path, **kwargs):
    import pytorch_lightning as pl

    options = {
        "max_epochs": 1,
        "accelerator": "cpu",
        "devices": 1,
        "logger": pl.loggers.CSVLogger(tmp_path, name="runs", version="version_abcdef"),
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "default_root_dir": tmp_path,
    }
    options.update(kwargs)
    return pl.Trainer(**options)


def test_the_override_stays_and_the_class_gets_the_mixin() -> None:
    out = upgraded(TALLY)
    assert "from lightning_mgpu.upgrade.progress_bar_dict import LegacyProgressBarDict" in out
    assert "class Tally(pl.LightningModule, LegacyProgressBarDict):" in out
    assert "items = super().get_progress_bar_dict()" in out  # the override as it was
    assert rules.TODO_TAG not in out and not unmarked(out)
    assert any(f.rule == "progress-bar-dict" for f in upgrade_source(TALLY).changes)


@pytest.mark.parametrize("source", [TALLY, TALLY_SETUP], ids=["no-setup", "setup-without-super"])
def test_the_tqdm_bar_shows_what_the_override_returns(source: str, tmp_path) -> None:
    """1.x's bar: {**module.get_progress_bar_dict(), **trainer.progress_bar_metrics}, the override's super() giving
    1.x's loss (the mean of the last 20 training losses, .3g) and v_num; here without v_num, with "seen"."""
    import torch

    torch.manual_seed(0)
    model = _module(upgraded(source), "Tally")
    trainer = _trainer(tmp_path)
    trainer.fit(model, _loader(), _loader(batches=1))
    bar = trainer.progress_bar_callback
    assert type(bar).__name__ == "TQDMProgressBar"
    shown = bar.get_metrics(trainer, model)
    loss = f"{torch.tensor(model.losses[-20:]).mean().item():.3g}"
    assert shown == {"loss": loss, "seen": 4, **trainer.progress_bar_metrics}
    assert list(shown)[:2] == ["loss", "seen"] and "v_num" not in shown and "val_sq" in shown
    postfix = bar.train_progress_bar.postfix
    assert f"loss={loss}" in postfix and "seen=4" in postfix and "v_num" not in postfix
    if "setup" in source.split("def get_progress_bar_dict")[0]:
        assert model.stages == ["fit"]  # the user's setup ran, once, as written
    # 1.x's default under the override: the running loss and the logger's version (its last 4 characters).
    default = LegacyProgressBarDict.get_progress_bar_dict(model)
    assert default == {"loss": loss, "v_num": "cdef"}


def test_the_running_loss_keeps_1x_window_of_20(tmp_path) -> None:
    import torch

    torch.manual_seed(0)
    model = _module(upgraded(TALLY), "Tally")
    trainer = _trainer(tmp_path, max_epochs=2, limit_val_batches=0)
    trainer.fit(model, _loader(batches=13))
    assert len(model.losses) == 26
    shown = trainer.progress_bar_callback.get_metrics(trainer, model)
    assert shown["loss"] == f"{torch.tensor(model.losses[-20:]).mean().item():.3g}"


def test_validate_alone_shows_1x_nan_loss(tmp_path) -> None:
    model = _module(upgraded(TALLY_SETUP), "Tally")
    trainer = _trainer(tmp_path)
    trainer.validate(model, _loader(batches=1), verbose=False)
    assert model.stages == ["validate"]
    assert trainer.progress_bar_callback.get_metrics(trainer, model)["loss"] == "nan"


def test_a_module_without_the_override_is_unchanged(tmp_path) -> None:
    from pytorch_lightning.callbacks.progress.progress_bar import get_standard_metrics

    out = upgraded(PLAIN)
    assert out == PLAIN
    tally = _module(upgraded(TALLY), "Tally")
    _trainer(tmp_path / "a").fit(tally, _loader(batches=1), _loader(batches=1))  # the bar's patch is in place now
    model = _module(out, "Plain")
    trainer = _trainer(tmp_path / "b")
    trainer.fit(model, _loader(batches=1), _loader(batches=1))
    shown = trainer.progress_bar_callback.get_metrics(trainer, model)
    assert shown == {**get_standard_metrics(trainer), **trainer.progress_bar_metrics}
    assert shown["v_num"] == "cdef" and "loss" not in shown
    assert [type(c).__name__ for c in trainer.callbacks].count("LegacyRunningLoss_pytorch_lightning") == 0


def test_a_bar_subclass_calling_super_gets_the_module_dict(tmp_path) -> None:
    """1.5-1.6's ProgressBarBase.get_metrics called the module's hook: a bar's own get_metrics reached it by super()."""
    from pytorch_lightning.callbacks import TQDMProgressBar

    class Bar(TQDMProgressBar):
        def get_metrics(self, trainer, pl_module):
            items = super().get_metrics(trainer, pl_module)
            items["bar"] = 1
            return items

    model = _module(upgraded(TALLY), "Tally")
    trainer = _trainer(tmp_path, callbacks=[Bar()])
    trainer.fit(model, _loader(batches=2), _loader(batches=1))
    shown = trainer.progress_bar_callback.get_metrics(trainer, model)
    assert shown["seen"] == 2 and shown["bar"] == 1 and "v_num" not in shown


def test_a_callback_method_of_that_name_is_the_users_own() -> None:
    source = textwrap.dedent(
        """\
        from pytorch_lightning.callbacks import progress


        class PrintBar(progress.ProgressBarBase):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                print(self.get_progress_bar_dict(trainer))

            def get_progress_bar_dict(self, trainer):
                return dict(trainer.progress_bar_metrics)
        """
    )
    out = upgraded(source)
    assert "LegacyProgressBarDict" not in out and rules.TODO_TAG not in out and not unmarked(out)


@pytest.mark.parametrize(
    "method",
    ["def get_progress_bar_dict(self, trainer):", "@property\n    def get_progress_bar_dict(self):"],
    ids=["other-signature", "decorated"],
)
def test_an_override_1x_did_not_call_so_keeps_the_todo(method: str) -> None:
    source = TALLY.replace("def get_progress_bar_dict(self):", method)
    out = upgraded(source)
    assert "LegacyProgressBarDict" not in out
    assert "TODO(lightning-mgpu:progress-bar-dict)" in out


def test_with_legacy_step_ends_both_mixins_are_last(tmp_path) -> None:
    source = TALLY.replace(
        "    def validation_step(",
        "    def training_step_end(self, outputs):\n        self.log('ends', 1.0)\n        return outputs\n\n"
        "    def validation_step(",
    )
    out = upgraded(source)
    assert "class Tally(pl.LightningModule, LegacyStepEnds, LegacyProgressBarDict):" in out
    model = _module(out, "Tally")
    trainer = _trainer(tmp_path)
    trainer.fit(model, _loader(batches=2), _loader(batches=1))
    assert trainer.progress_bar_callback.get_metrics(trainer, model)["seen"] == 2
    assert "ends" in trainer.callback_metrics


def test_the_mixin_reads_the_tree_from_the_live_objects_class() -> None:
    """``instance_namespace`` (once ``namespace_of``, the name findings.namespace_of has for source code): the tree a
    module's class comes from, which picks the recorder class and the bar the mixin patches."""
    import lightning.pytorch as lp
    import pytorch_lightning as pl

    from lightning_mgpu.upgrade import findings, progress_bar_dict

    assert progress_bar_dict.instance_namespace(pl.LightningModule()) == "pytorch_lightning"
    assert progress_bar_dict.instance_namespace(lp.LightningModule()) == "lightning.pytorch"
    assert progress_bar_dict.instance_namespace(object()) == "lightning.pytorch"  # neither: the default tree
    assert not hasattr(progress_bar_dict, "namespace_of")  # one meaning per name: findings' reads source
    assert findings.namespace_of("import pytorch_lightning as pl\n") == "pytorch_lightning"
