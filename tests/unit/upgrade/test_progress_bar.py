"""The progress bar's 1.x names: ``progress.ProgressBarBase`` reached through the module's local name (renamed-name)
and ``trainer.progress_bar_dict`` (trainer-progress-bar-dict)."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from tests.helpers.upgrade_check import upgraded

#: A quiet progress bar that keeps what it would show, and a module that logs one value to the bar.
SCRIPT = textwrap.dedent(
    """\
    import torch
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import progress


    class QuietBar(progress.ProgressBarBase):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            shown = trainer.progress_bar_dict
            shown.pop("v_num", None)
            self.seen.append(shown)


    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("half", 0.5, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)
    """
)


def test_the_bar_converts_and_reads_what_2x_shows(tmp_path) -> None:
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.loggers import CSVLogger
    from torch.utils.data import DataLoader, TensorDataset

    out = upgraded(SCRIPT)
    assert "ProgressBarBase" not in out and "progress_bar_dict" not in out and not unmarked(out)
    assert rules.TODO_PREFIX not in out
    namespace: dict[str, object] = {}
    exec(compile(out, "converted", "exec"), namespace)  # noqa: S102
    bar = namespace["QuietBar"]()  # type: ignore[operator]
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=CSVLogger(tmp_path, version=7),
        callbacks=[bar],
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(namespace["Tiny"](), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=8))  # type: ignore[operator]
    # What 1.x showed but the running loss (2.0 dropped it), as a new dict: the pop took v_num from that copy only.
    assert bar.seen[-1] == {"half": 0.5}
    assert trainer.progress_bar_metrics == {"half": 0.5}
    assert bar.get_metrics(trainer, trainer.lightning_module)["v_num"] == 7


@pytest.mark.parametrize(
    "use",
    [
        "metrics = self.trainer.progress_bar_dict\n",
        "metrics = pl_trainer.progress_bar_dict\n",
    ],
)
def test_progress_bar_dict_of_a_trainer(use: str) -> None:
    out = upgraded("import pytorch_lightning as pl\n" + use)
    owner = use.split("= ")[1].split(".progress_bar_dict")[0]
    assert f"metrics = {{**get_standard_metrics({owner}), **{owner}.progress_bar_metrics}}" in out
    assert "from pytorch_lightning.callbacks.progress.progress_bar import get_standard_metrics" in out


def test_progress_bar_dict_of_something_else_stays() -> None:
    source = "import pytorch_lightning as pl\nd = state.progress_bar_dict\ne = make_trainer().progress_bar_dict\n"
    assert upgraded(source) == source


def test_progress_module_alias_renames_the_base_class() -> None:
    source = "from pytorch_lightning.callbacks import progress as bars\nclass B(bars.ProgressBarBase):\n    pass\n"
    out = upgraded(source)
    assert "class B(ProgressBar):" in out and "from pytorch_lightning.callbacks import ProgressBar" in out
