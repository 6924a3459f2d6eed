"""Rule ``epoch-end``: Lightning 1.3/1.4's ``on_train_epoch_end(self, outputs)`` on a LightningModule without
``training_epoch_end``. Those versions looked for a parameter named ``outputs`` and handed the hook the list they
handed ``training_epoch_end`` (one entry per batch: the step's dict, detached); 1.5 stopped. It converts as a
``training_epoch_end`` does: the step collects its outputs and the 2.x hook takes the list."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.trainer import quiet_trainer
from tests.helpers.upgrade_check import upgraded, upgraded_result

TALLY = """import pytorch_lightning as pl
import torch
from torch import nn


class ParityTally(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3, 2)
        self.epoch_means = []

    def training_step(self, batch, batch_idx):
        inputs, labels = batch
        logits = self.head(inputs)
        loss = nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "hits": (logits.argmax(1) == labels).float()}

    def on_train_epoch_end(self, outputs):
        hits = torch.cat([entry["hits"] for entry in outputs])
        self.epoch_means.append((len(outputs), hits.mean().item(), outputs[0]["loss"].requires_grad))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)
"""


def test_the_outputs_hook_gets_the_collected_list(tmp_path) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    result = upgraded_result(TALLY, no_todo=True, no_unmarked=True)
    out = result.source
    assert "def on_train_epoch_end(self):" in out and "training_epoch_end" not in out
    assert "self.training_step_outputs.append(" in out
    assert [f.rule for f in result.findings if not f.todo] == ["epoch-end"]
    namespace: dict[str, object] = {}
    exec(compile(out, "tally", "exec"), namespace)  # noqa: S102
    torch.manual_seed(0)
    inputs, labels = torch.randn(12, 3), torch.randint(0, 2, (12,))
    loader = DataLoader(TensorDataset(inputs, labels), batch_size=4)
    model = namespace["ParityTally"]()
    trainer = quiet_trainer("pytorch_lightning", max_epochs=2, limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(model, loader)
    # lr=0: the head never changes, so 1.x's list (3 batches, every sample's hit, the loss detached) is known.
    expected = (model.head(inputs).argmax(1) == labels).float().mean().item()
    assert len(model.epoch_means) == 2
    for count, mean, grad in model.epoch_means:
        assert count == 3 and mean == pytest.approx(expected) and not grad  # the list starts empty each epoch


def test_beside_training_epoch_end_it_keeps_the_hook_param_todo() -> None:
    # 1.x ran both, training_epoch_end first: not one hook.
    source = TALLY.replace(
        "    def configure_optimizers",
        "    def training_epoch_end(self, outputs):\n        pass\n\n    def configure_optimizers",
    )
    assert "TODO(lightning-mgpu:hook-param)" in upgrade_source(source).source


def test_several_optimizers_keep_the_todo() -> None:
    # 1.x nested the list per optimizer (1.3, 1.4): not the collected shape.
    source = TALLY.replace(
        "def training_step(self, batch, batch_idx):", "def training_step(self, batch, batch_idx, optimizer_idx):"
    )
    out = upgraded(source)
    assert "TODO(lightning-mgpu:hook-param)" in out and "def on_train_epoch_end(self):" not in out


PAIRED = """import pytorch_lightning as pl
import torch
from torch import nn


class Paired(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.left = nn.Linear(2, 1)
        self.right = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx, optimizer_idx):
        net = self.left if optimizer_idx == 0 else self.right
        return {"loss": net(batch[0]).pow(2).mean(), "side": optimizer_idx}

    def training_epoch_end(self, outputs):
        self.sides = [[o["side"] for o in per_optimizer] for per_optimizer in outputs]

    def configure_optimizers(self):
        return [torch.optim.SGD(self.left.parameters(), lr=0.1), torch.optim.SGD(self.right.parameters(), lr=0.1)]
"""


def test_several_optimizers_epoch_end_keeps_its_own_todo_on_a_second_run_too() -> None:
    # 1.x nested the outputs [optimizer][batch] up to 1.5 and [batch][optimizer] from 1.6: the file does not say
    # which. upgraded() also runs the tool on its own output: the manual-optimization step it wrote gets the same TODO.
    out = upgraded(PAIRED)
    assert out.count("TODO(lightning-mgpu:") == 1
    assert "TODO(lightning-mgpu:epoch-end-optimizers): training_epoch_end(outputs), several optimizers" in out
    assert "def _training_step_1x(self, batch, batch_idx, optimizer_index):" in out
