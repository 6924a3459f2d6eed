"""``lightning_mgpu.upgrade.transform``: each 1.x spelling, its 2.x rewrite, and what is left as a TODO."""

from __future__ import annotations

import pytest

# The [upgrade] extra: an environment without it (a GPU node's own Python) skips these, not errors.
pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.transform import upgrade_source

TODO = rules.TODO_PREFIX


def upgraded(source: str) -> str:
    result = upgrade_source(source)
    again = upgrade_source(result.source)
    assert again.source == result.source and not again.changes, "a second run changed something"
    return result.source


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('Trainer(gpus=4, accelerator="dp")', 'Trainer(accelerator="gpu", devices=4, strategy="dp")'),
        (
            'Trainer(gpus=[0, 1], distributed_backend="ddp")',
            'Trainer(accelerator="gpu", devices=[0, 1], strategy="ddp")',
        ),
        ('Trainer(gpus="0,1", accelerator="ddp2")', 'Trainer(accelerator="gpu", devices="0,1", strategy="ddp2")'),
        ("Trainer(gpus=0)", 'Trainer(accelerator="cpu")'),
        ('Trainer(gpus=n, accelerator="horovod")', 'Trainer(accelerator="gpu", devices=n, strategy="horovod")'),
        ('Trainer(num_processes=2, accelerator="ddp_cpu")', 'Trainer(accelerator="cpu", devices=2, strategy="ddp")'),
        ('Trainer(gpus=2, plugins="ddp_sharded")', 'Trainer(accelerator="gpu", devices=2, strategy="ddp_sharded")'),
        ('Trainer(gpus=2, plugins=["ddp_sharded"])', 'Trainer(accelerator="gpu", devices=2, strategy="ddp_sharded")'),
        ('Trainer(accelerator="gpu", gpus=2)', 'Trainer(accelerator="gpu", devices=2)'),
        ('Trainer(precision=16, amp_backend="native")', 'Trainer(precision="16-mixed")'),
        ('Trainer(precision="bf16")', 'Trainer(precision="bf16-mixed")'),
        ("Trainer(precision=32)", "Trainer(precision=32)"),
        ("Trainer(replace_sampler_ddp=False)", "Trainer(use_distributed_sampler=False)"),
        ("Trainer(checkpoint_callback=False)", "Trainer(enable_checkpointing=False)"),
        ("Trainer(weights_summary=None)", "Trainer(enable_model_summary=False)"),
        ('Trainer(weights_summary="top", max_epochs=2)', "Trainer(max_epochs=2)"),
        (
            "pl.Trainer.from_argparse_args(args, gpus=2)",
            'pl.Trainer.from_argparse_args(args, accelerator="gpu", devices=2)',
        ),
        (
            'Trainer(**{"gpus": 2, "accelerator": "dp"})',
            'Trainer(**{"accelerator": "gpu", "devices": 2, "strategy": "dp"})',
        ),
        ("Trainer(max_epochs=3)", "Trainer(max_epochs=3)"),
    ],
)
def test_trainer_arguments(before: str, after: str) -> None:
    out = upgraded(f"t = {before}\n")
    registers = f"import lightning_mgpu  {rules.REGISTERS_COMMENT}\n"  # where a bundle strategy name is passed
    bundle_name = any(f'"{name}"' in after for name in ("dp", "ddp2", "horovod", "ddp_sharded"))
    assert out == (registers if bundle_name else "") + f"t = {after}\n"


@pytest.mark.parametrize(
    ("before", "todo"),
    [
        ('Trainer(amp_backend="apex", amp_level="O2")', "apex AMP is replaced by native AMP"),
        ("Trainer(tpu_cores=8)", 'accelerator="tpu", devices=N'),
        ("Trainer(ipus=4)", 'accelerator="ipu"'),
        ("Trainer(resume_from_checkpoint=path)", "pass ckpt_path=path to trainer.fit"),
        ('Trainer(weights_summary="full")', "ModelSummary(max_depth=-1)"),
        ("Trainer(checkpoint_callback=ModelCheckpoint())", "put the ModelCheckpoint in callbacks"),
        ("Trainer(gpus=2, devices=4)", "gpus=2 maps to devices, which this call already sets"),
        ('Trainer(accelerator="ddp", strategy="ddp_spawn")', 'accelerator="ddp" maps to strategy'),
    ],
)
def test_what_cannot_be_rewritten_gets_a_todo_at_the_spot(before: str, todo: str) -> None:
    result = upgrade_source(f"def main(path):\n    t = {before}\n")
    assert f"    {TODO}" in result.source and todo in result.source, result.source
    assert result.todos and all(f.line == 2 for f in result.todos)
    # Once, however often it runs.
    assert upgrade_source(result.source).source.count(TODO) == result.source.count(TODO)


def test_resume_from_checkpoint_moves_to_fit_in_the_same_scope() -> None:
    source = "def main(path):\n    trainer = Trainer(gpus=1, resume_from_checkpoint=path)\n    trainer.fit(model, dm)\n"
    assert upgraded(source) == (
        'def main(path):\n    trainer = Trainer(accelerator="gpu", devices=1)\n    trainer.fit(model, dm, ckpt_path=path)\n'
    )
    # A fit in another scope: the tool does not guess.
    elsewhere = "trainer = Trainer(resume_from_checkpoint='a.ckpt')\ndef go():\n    trainer.fit(model)\n"
    assert "pass ckpt_path='a.ckpt' to trainer.fit" in upgrade_source(elsewhere).source


def test_comments_and_layout_survive() -> None:
    source = (
        'trainer = Trainer(\n    gpus=2,  # both cards\n    accelerator="ddp",\n    max_epochs=10,  # long enough\n)\n'
    )
    assert upgraded(source) == (
        "trainer = Trainer(\n"
        '    accelerator="gpu",\n'
        "    devices=2,  # both cards\n"
        '    strategy="ddp",\n'
        "    max_epochs=10,  # long enough\n"
        ")\n"
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "from pytorch_lightning.strategies import DDPShardedStrategy\n",
            "from lightning_mgpu.pl import ShardedStrategy as DDPShardedStrategy\n",
        ),
        ("from lightning.pytorch.strategies import HorovodStrategy\n", "from lightning_mgpu import HorovodStrategy\n"),
        (
            "from pytorch_lightning.plugins import DDP2Plugin, DataParallelPlugin\n",
            "from lightning_mgpu.pl import DDP2Strategy as DDP2Plugin\nfrom lightning_mgpu.pl import DataParallelStrategy as DataParallelPlugin\n",
        ),
        (
            "from pytorch_lightning.loggers import CSVLogger, NeptuneLogger\n",
            "from pytorch_lightning.loggers import CSVLogger\nfrom lightning_mgpu.pl.loggers import NeptuneLogger\n",
        ),
        (
            "from pytorch_lightning.strategies import DDPStrategy\n",
            "from pytorch_lightning.strategies import DDPStrategy\n",
        ),
    ],
)
def test_imports_of_removed_classes_point_at_the_bundle_in_the_same_namespace(before: str, after: str) -> None:
    assert upgraded(before) == after


def test_spawn_sharded_and_gpu_stats_monitor_call_sites() -> None:
    source = (
        "import pytorch_lightning as pl\n"
        "from pytorch_lightning.strategies import DDPSpawnShardedStrategy\n"
        "from pytorch_lightning.callbacks import GPUStatsMonitor\n"
        "cbs = [GPUStatsMonitor(temperature=True)]\n"
        "s = DDPSpawnShardedStrategy(find_unused_parameters=False)\n"
        "ok = isinstance(cbs[0], GPUStatsMonitor)\n"
        "logger = pl.loggers.NeptuneLogger(project='p')\n"
        "s2 = pl.strategies.DataParallelStrategy()\n"
    )
    out = upgraded(source)
    assert 's = ShardedStrategy(find_unused_parameters=False, start_method="spawn")' in out
    assert "cbs = [GPUUtilizationMonitor()]" in out and f"{TODO}GPUStatsMonitor(temperature=True) became" in out
    assert "ok = isinstance(cbs[0], GPUUtilizationMonitor)" in out
    assert "logger = NeptuneLogger(project='p')" in out and "s2 = DataParallelStrategy()" in out
    for line in (
        "from lightning_mgpu.pl import ShardedStrategy",
        "from lightning_mgpu.pl.callbacks import GPUUtilizationMonitor",
        "from lightning_mgpu.pl.loggers import NeptuneLogger",
        "from lightning_mgpu.pl import DataParallelStrategy",
    ):
        assert line in out.splitlines(), line
    assert "DDPSpawnShardedStrategy" not in out and "GPUStatsMonitor(" not in out.replace(f"{TODO}GPUStatsMonitor(", "")


HOOKS = '''class M(LightningModule):
    def training_step(self, batch, batch_idx, optimizer_idx):
        return self(batch)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu, using_native_amp, using_lbfgs):
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu, using_native_amp, using_lbfgs)

    def backward(self, loss, optimizer, optimizer_idx, *args, **kwargs):
        loss.backward(*args, **kwargs)

    def training_step_end(self, outputs):
        """Average the replicas' losses."""
        loss = outputs["loss"].mean()
        return {"loss": loss}

    def validation_step_end(self, outputs):
        return torch.sum(outputs)

    def test_step_end(self, outputs):
        self.log("x", outputs.mean())
        return outputs.mean()

    def validation_epoch_end(self, outputs):
        pass
'''


def test_hooks_lose_what_2x_dropped_and_keep_what_they_use() -> None:
    out = upgraded(HOOKS)
    assert "def training_step(self, batch, batch_idx):" in out
    assert "def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):" in out
    assert "super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)" in out
    assert "def backward(self, loss, *args, **kwargs):" in out
    assert "training_step_end" not in out and "validation_step_end" not in out  # reductions the bundle's dp does
    assert "def test_step_end" in out and f"{TODO}test_step_end does more than reduce" in out  # it logs
    assert f"{TODO}validation_epoch_end(outputs) is gone in 2.x" in out and "on_validation_epoch_end" in out


def test_optimizer_idx_in_use_stays_with_the_manual_optimization_todo() -> None:
    source = "class GAN(LightningModule):\n    def training_step(self, batch, batch_idx, optimizer_idx):\n        if optimizer_idx == 0:\n            return 1\n"
    result = upgrade_source(source)
    assert "def training_step(self, batch, batch_idx, optimizer_idx):" in result.source
    assert "self.automatic_optimization = False" in result.source and result.todos[0].line == 2


def test_a_backward_already_in_the_2x_shape_is_left_alone() -> None:
    source = "class M(LightningModule):\n    def backward(self, loss, *args, **kwargs):\n        loss.backward()\n"
    assert upgraded(source) == source


def test_fairscale_checkpoint_wrapper_stays_with_a_note() -> None:
    result = upgrade_source("from fairscale.nn import checkpoint_wrapper\nblock = checkpoint_wrapper(block)\n")
    assert result.source.startswith("from fairscale.nn import checkpoint_wrapper") and not result.changes
    assert result.notes and "ActivationCheckpointing" in result.notes[0].message


def test_a_bundle_strategy_name_brings_the_import_that_registers_it() -> None:
    out = upgraded(
        '"""A script."""\nfrom pytorch_lightning import Trainer\n\nt = Trainer(gpus=2, accelerator="ddp2")\n'
    )
    assert out.splitlines()[2] == f"import lightning_mgpu  {rules.REGISTERS_COMMENT}"
    # Already there, or imported through one of its modules, or a name Lightning has itself: nothing added.
    for source in (
        'import lightning_mgpu\nt = Trainer(strategy="dp")\n',
        'from lightning_mgpu.callbacks import ActivationCheckpointing\nt = Trainer(strategy="horovod")\n',
        't = Trainer(accelerator="ddp")\n',
    ):
        assert "import lightning_mgpu  #" not in upgraded(source)


def test_the_bundle_names_the_tool_knows_are_registered_by_the_bundle() -> None:
    from lightning_mgpu.strategies import BUNDLE_STRATEGY_NAMES

    assert rules.BUNDLE_STRATEGY_NAMES <= set(BUNDLE_STRATEGY_NAMES)
    assert {v for v in rules.STRATEGY_STRINGS.values() if v not in ("ddp", "ddp_spawn")} <= rules.BUNDLE_STRATEGY_NAMES
