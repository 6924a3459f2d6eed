"""Rule ``auto-move-data`` and ``lightning_mgpu.upgrade.legacy_move``: 1.0-1.4's ``@auto_move_data`` moved a
LightningModule method's arguments to the module's device through its ``transfer_batch_to_device``
(``(args, kwargs)``, ``device=self.device``, 1.4's ``dataloader_idx=None``), and only called the method on anything
else. The converted file imports the bundle's decorator, which does the same."""

from __future__ import annotations

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
import torch

from lightning_mgpu.upgrade.legacy_move import legacy_auto_move_data


class Echo(pl.LightningModule):
    @legacy_auto_move_data
    def forward(self, x, scale=None):
        """Gives back what it got."""
        return x, scale


def test_arguments_go_to_the_modules_device() -> None:
    # The meta device stands for a GPU: the module is moved there, its CPU inputs follow it, as 1.x moved them.
    model = Echo().to("meta")
    x, scale = model(torch.ones(2), scale=torch.ones(1))
    assert x.device.type == "meta" and scale.device.type == "meta"
    assert Echo.forward.__doc__ == "Gives back what it got." and Echo.forward.__name__ == "forward"


def test_the_modules_own_transfer_hook_moves_them_as_1x_called_it() -> None:
    calls = []

    class Halved(Echo):
        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            calls.append((device, dataloader_idx))
            (args, kwargs) = batch
            return tuple(a / 2 for a in args), {k: v / 2 for k, v in kwargs.items()}

    x, scale = Halved()(torch.full((2,), 4.0), scale=torch.full((1,), 8.0))
    assert x.tolist() == [2.0, 2.0] and scale.tolist() == [4.0]
    assert calls == [(torch.device("cpu"), None)]  # one call for args and kwargs together, as 1.4 made it


def test_anything_else_is_called_as_it_is() -> None:
    class Plain(torch.nn.Module):
        @legacy_auto_move_data
        def forward(self, x):
            return x

    x = torch.ones(1)
    assert Plain()(x) is x


UPGRADE_SOURCE = """import torch
import pytorch_lightning as pl
from pytorch_lightning.core.decorators import auto_move_data


class Tagger(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 2)

    @auto_move_data
    def forward(self, tokens):
        return tokens.device


Tagger.predict_device = auto_move_data(Tagger.forward)
"""


def test_the_upgrade_keeps_the_decorator_as_the_bundles() -> None:
    pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")
    from tests.helpers.upgrade_check import upgraded

    out = upgraded(UPGRADE_SOURCE, no_todo=True, no_unmarked=True)
    assert "from lightning_mgpu.upgrade.legacy_move import legacy_auto_move_data\n" in out
    assert "Tagger.predict_device = legacy_auto_move_data(Tagger.forward)" in out
    namespace: dict[str, object] = {}
    exec(compile(out, "tagger", "exec"), namespace)  # noqa: S102
    model = namespace["Tagger"]().to("meta")  # type: ignore[operator]
    assert model(torch.zeros(1)).type == "meta" and model.predict_device(torch.zeros(1)).type == "meta"
    # A user's own alias stays, bound to the bundle's decorator.
    aliased = upgraded(UPGRADE_SOURCE.replace("import auto_move_data\n", "import auto_move_data as to_device\n"))
    assert "from lightning_mgpu.upgrade.legacy_move import legacy_auto_move_data as to_device\n" in aliased
