"""Rule ``trainer-accelerator-unread``: ``Trainer(accelerator="gpu" if n > 0 else "cpu", gpus=n, ...)``. 1.x's
accelerator connector (1.6 to 1.9) kept a device type given as ``accelerator=`` and took a non-zero ``gpus`` as the
number of devices; gpus=0 left the accelerator's default. Which device type a conditional holds only the run knows:
the settings move into ``**legacy_trainer_kwargs(...)`` (rule trainer-args-translated), which reads them as 1.x did."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.leftovers import unmarked
from lightning_mgpu.upgrade.trainer_args import legacy_trainer_kwargs
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded

# A hydra-style entry point: the device count from a config, a DDP plugin chosen by name.
ENTRY = """import pytorch_lightning as pl
from pytorch_lightning.plugins import DDPPlugin


def make_trainer(n_gpus, mode, bits, root):
    chosen = None
    if mode and mode.lower() != "none":
        chosen = mode
        if chosen.lower() == "ddp":
            chosen = DDPPlugin(find_unused_parameters=False)

    trainer = pl.Trainer(
        default_root_dir=root,
        accelerator="gpu" if n_gpus > 0 else "cpu",
        gpus=n_gpus,
        strategy=chosen,
        precision=bits if n_gpus > 0 else 32,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
    )
    return trainer
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"accelerator": "cpu", "gpus": 0}, {"accelerator": "cpu"}),
        ({"accelerator": "gpu", "gpus": 2}, {"accelerator": "gpu", "devices": 2}),
        # 1.x kept the device type given: two CPU processes; and every GPU where gpus was 0.
        ({"accelerator": "cpu", "gpus": 2}, {"accelerator": "cpu", "devices": 2}),
        ({"accelerator": "gpu", "gpus": 0}, {"accelerator": "gpu"}),
        ({"accelerator": "gpu", "gpus": [0, 1]}, {"accelerator": "gpu", "devices": [0, 1]}),
        # No device type given (or 2.x's "auto", or a 1.x strategy name): gpus names the GPU, as before.
        ({"gpus": 2}, {"accelerator": "gpu", "devices": 2}),
        ({"accelerator": "ddp", "gpus": 2}, {"strategy": "ddp", "accelerator": "gpu", "devices": 2}),
    ],
)
def test_a_device_type_given_beside_gpus_is_kept_as_1x_kept_it(given: dict, expected: dict) -> None:
    assert legacy_trainer_kwargs(given) == expected


def test_a_conditional_accelerator_beside_gpus_is_translated_at_run_time(tmp_path) -> None:
    from pytorch_lightning.accelerators import CPUAccelerator
    from pytorch_lightning.strategies import DDPStrategy

    result = upgrade_source(ENTRY)
    out = upgraded(ENTRY)
    assert rules.TODO_TAG not in out and unmarked(out) == [], out
    assert "trainer-args-translated" in {f.rule for f in result.findings}
    assert "**legacy_trainer_kwargs(" in out and "gpus=n_gpus," in out
    assert "chosen = DDPStrategy(find_unused_parameters=False)" in out and "DDPPlugin" not in out
    namespace: dict[str, object] = {}
    exec(compile(out, "entry", "exec"), namespace)  # noqa: S102
    make_trainer = namespace["make_trainer"]
    # No GPU here: gpus=0 with accelerator="cpu" is one CPU device, as in 1.x.
    trainer = make_trainer(0, None, 16, tmp_path)  # type: ignore[operator]
    assert isinstance(trainer.accelerator, CPUAccelerator) and trainer.num_devices == 1
    trainer = make_trainer(0, "ddp", 16, tmp_path)  # type: ignore[operator]
    assert isinstance(trainer.strategy, DDPStrategy) and isinstance(trainer.accelerator, CPUAccelerator)


def test_two_literals_that_disagree_stay_a_conflict() -> None:
    out = upgraded('import pytorch_lightning as pl\ntrainer = pl.Trainer(accelerator="cpu", gpus=2)\n')
    assert "TODO(lightning-mgpu:trainer-conflict)" in out and "legacy_trainer_kwargs" not in out
