"""``lightning_mgpu.upgrade.conflicts`` (rule ``trainer-conflict-resolved``): a default spelled beside the 1.x argument
that sets it goes; a real conflict stays a ``trainer-conflict`` TODO."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded

REGISTERS = f"import lightning_mgpu  {rules.REGISTERS_COMMENT}\n"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("Trainer(gpus=2, accelerator=None)", 'Trainer(accelerator="gpu", devices=2)'),
        ("Trainer(gpus=GPU, accelerator=None)", 'Trainer(accelerator="gpu" if GPU else "cpu", devices=GPU or 1)'),
        ('Trainer(accelerator="ddp", strategy=None, gpus=2)', 'Trainer(strategy="ddp", accelerator="gpu", devices=2)'),
        ('Trainer(accelerator="ddp", strategy="auto")', 'Trainer(strategy="ddp")'),
        (
            'Trainer(gpus=-1, accelerator="ddp", plugins="ddp_sharded")',
            REGISTERS + 'Trainer(accelerator="gpu", devices=-1, strategy="ddp_sharded")',
        ),
    ],
)
def test_a_default_beside_the_1x_argument_goes(before: str, after: str) -> None:
    *imports, call = after.split("\n")
    assert upgraded(f"t = {before}\n") == "".join(f"{i}\n" for i in imports) + f"t = {call}\n"


@pytest.mark.parametrize(
    "source",
    ['Trainer(accelerator="ddp", strategy="ddp_spawn")', 'Trainer(gpus=2, accelerator="tpu")'],
)
def test_two_real_settings_stay_a_conflict(source: str) -> None:
    assert "trainer-conflict):" in upgraded(f"t = {source}\n")


def test_the_result_builds_on_lightning_2() -> None:
    """The resolved call is a Trainer 2.x builds (accelerator=None gone), here on the CPU."""
    import pytorch_lightning as pl

    source = upgraded("t = Trainer(gpus=0, accelerator=None, logger=False)\n")
    assert "None" not in source.replace("logger=False", "")
    trainer = eval(source.split("=", 1)[1].strip(), {"Trainer": pl.Trainer})  # noqa: S307
    assert trainer.accelerator.__class__.__name__ == "CPUAccelerator"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            'Trainer(gpus=torch.cuda.device_count(), strategy="ddp", accelerator="gpu")',
            'Trainer(devices=torch.cuda.device_count() or "auto", strategy="ddp", accelerator="gpu")',
        ),
        ('Trainer(accelerator="cuda", gpus=args.gpus)', 'Trainer(accelerator="cuda", devices=args.gpus or "auto")'),
        (
            'Trainer(gpus=n if cuda else None, accelerator="gpu")',
            'Trainer(devices=(n if cuda else None) or "auto", accelerator="gpu")',
        ),
    ],
)
def test_gpus_beside_accelerator_gpu(before: str, after: str) -> None:
    """Rule ``trainer-gpus-beside-accelerator``: 1.5-1.9 kept the GPU accelerator the call named, with X devices, or
    all of them where X was 0 or None."""
    result = upgrade_source(f"t = {before}\n")
    assert result.source == f"t = {after}\n"
    assert [f.rule for f in result.findings] == ["trainer-gpus-beside-accelerator"]
    assert upgrade_source(result.source).source == result.source


def test_gpus_beside_accelerator_gpu_and_devices_stays_a_conflict() -> None:
    assert "trainer-conflict):" in upgraded('t = Trainer(gpus=args.gpus, accelerator="gpu", devices=2)\n')


def test_gpus_zero_beside_accelerator_gpu_means_every_gpu_as_in_1x() -> None:
    """1.9.5's accelerator connector left devices unset for gpus=0 and took every GPU; 2.x's "auto" does the same."""
    import pytorch_lightning as pl

    source = upgraded('t = Trainer(gpus=n, accelerator="gpu", logger=False)\n')
    assert 'devices=n or "auto"' in source
    trainer_call = source.split("=", 1)[1].strip().replace('accelerator="gpu"', 'accelerator="cpu"')
    trainer = eval(trainer_call, {"Trainer": pl.Trainer, "n": 0})  # noqa: S307  (on the CPU here: "auto" is 1)
    assert trainer.num_devices == 1
