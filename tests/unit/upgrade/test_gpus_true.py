"""``Trainer(gpus=True)``: 1.x (1.0 to 1.9) refused a bool ``gpus`` at ``parse_gpu_ids``, except beside
``auto_select_gpus=True``, where ``pick_multiple_gpus(True)`` picked ``range(True)``: one free GPU. 2.x refuses
``devices=True``, so that pair becomes ``devices=1`` (statically and in ``legacy_trainer_kwargs``)."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="the upgrade tool needs the [upgrade] extra")

from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs  # noqa: E402
from tests.helpers.upgrade_check import upgraded  # noqa: E402

PICKED = """\
import pytorch_lightning as pl


def build_runner(out_dir):
    return pl.Trainer(default_root_dir=out_dir, gpus=True, auto_select_gpus=True, max_epochs=4)
"""

REFUSED = """\
import pytorch_lightning as pl

runner = pl.Trainer(gpus=True, max_epochs=4)
"""


def test_gpus_true_beside_auto_select_is_one_device() -> None:
    out = upgraded(PICKED, no_todo=True, no_unmarked=True)
    assert 'accelerator="gpu", devices=1,' in out
    assert "gpus=" not in out and "auto_select_gpus=" not in out and "devices=True" not in out


def test_gpus_true_alone_stays_an_error_as_in_1x() -> None:
    # 1.x raised MisconfigurationException for a bool gpus; 2.x raises TypeError for devices=True: no count is
    # invented for a script that did not run.
    out = upgraded(REFUSED)
    assert "devices=True" in out


def test_2x_refuses_devices_true() -> None:
    device_parser = pytest.importorskip("lightning_fabric.utilities.device_parser")
    with pytest.raises(TypeError):
        device_parser._parse_gpu_ids(True, include_cuda=True)


def test_1x_pick_multiple_gpus_took_true_as_one() -> None:
    # 1.x: ``if auto_select_gpus and isinstance(gpus, int): gpus = pick_multiple_gpus(gpus)``, whose loop is
    # ``for _ in range(nb)``; a bool is an int there.
    assert isinstance(True, int) and len(range(True)) == 1


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"gpus": True, "auto_select_gpus": True}, {"accelerator": "gpu", "devices": 1}),
        ({"gpus": 2, "auto_select_gpus": True}, {"accelerator": "gpu", "devices": 2}),
        ({"gpus": True}, {"accelerator": "gpu", "devices": True}),
    ],
)
def test_run_time_translation_reads_gpus_true_as_1x(given: dict, expected: dict) -> None:
    assert legacy_trainer_kwargs(given) == expected
