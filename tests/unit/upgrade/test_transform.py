"""``lightning_mgpu.upgrade.transform``: each 1.x spelling, its 2.x rewrite, and what is left as a TODO."""

from __future__ import annotations

import pytest

# The [upgrade] extra: an environment without it (a GPU node's own Python) skips these, not errors.
pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.upgrade import rules
from lightning_mgpu.upgrade.run import explain
from lightning_mgpu.upgrade.transform import upgrade_source
from tests.helpers.upgrade_check import upgraded

TODO = rules.TODO_PREFIX


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
        # -1 ("every GPU") is a literal too: no conditional on it.
        ("Trainer(gpus=-1)", 'Trainer(accelerator="gpu", devices=-1)'),
        (
            'Trainer(gpus=n, accelerator="horovod")',
            'Trainer(accelerator="gpu" if n else "cpu", devices=n or 1, strategy="horovod")',
        ),
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
        ('Trainer(amp_backend="apex", amp_level="O2", precision=16)', "trainer-apex): apex AMP is gone"),
        ("Trainer(amp_backend=backend, precision=16)", "trainer-amp-backend-variable): amp_backend=backend"),
        ("Trainer(truncated_bptt_steps=2)", "trainer-tbptt): truncated_bptt_steps is gone"),
        # Beside a splat of its own a value the tool cannot read keeps its TODO; alone it is translated
        # at run time (trainer-args-translated, test_translate_args.py).
        ('Trainer(weights_summary="full", callbacks=cbs, **extra)', "trainer-weights-summary): weights_summary="),
        ("Trainer(checkpoint_callback=ModelCheckpoint(), callbacks=cbs)", "trainer-checkpoint-callback):"),
        ("Trainer(gpus=2, devices=4)", "trainer-conflict): gpus=2 maps to devices, set here too"),
        (
            "Trainer(accelerator=args.backend, **extra)",
            "trainer-accelerator-unknown): accelerator=args.backend",
        ),
        ('Trainer(accelerator="ddp", strategy="ddp_spawn")', 'trainer-conflict): accelerator="ddp" maps to strategy'),
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
        'def main(path):\n    trainer = Trainer(accelerator="gpu", devices=1)\n    trainer.fit(model, dm,'
        " ckpt_path=path)\n"
    )
    # A fit in another scope: the checkpoint stays with the Trainer object, whose next fit resumes from it.
    elsewhere = "trainer = Trainer(resume_from_checkpoint='a.ckpt')\ndef go():\n    trainer.fit(model)\n"
    out = upgraded(elsewhere)
    assert "trainer = legacy_resume(Trainer(), 'a.ckpt')\n" in out and "trainer.fit(model)\n" in out


def test_resume_in_super_init_gets_a_todo_at_the_spot() -> None:
    source = "class T(Trainer):\n    def __init__(self, path):\n        super().__init__(resume_from_checkpoint=path)\n"
    result = upgrade_source(source)
    assert "        # TODO(lightning-mgpu:trainer-resume): resume_from_checkpoint is gone: pass ckpt_path=path" in (
        result.source
    )
    assert upgrade_source(result.source).source == result.source


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
            "from lightning_mgpu.pl import ShardedStrategy\n",
        ),
        ("from lightning.pytorch.strategies import HorovodStrategy\n", "from lightning_mgpu import HorovodStrategy\n"),
        (
            "from pytorch_lightning.plugins import DDPShardedPlugin as Sharded\ns = Sharded()\n",
            "from lightning_mgpu.pl import ShardedStrategy as Sharded\ns = Sharded()\n",
        ),
        (
            "from pytorch_lightning.plugins import DDPShardedPlugin\ns = DDPShardedPlugin()\n",
            "from lightning_mgpu.pl import ShardedStrategy\ns = ShardedStrategy()\n",
        ),
        (
            "from pytorch_lightning.plugins import DDP2Plugin, DataParallelPlugin\n",
            "from lightning_mgpu.pl import DDP2Strategy, DataParallelStrategy\n",  # a statement that imports both
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
    assert (
        "cbs = [GPUUtilizationMonitor()]" in out
        and "gpu-stats-monitor): GPUStatsMonitor(temperature=True) became" in out
    )
    assert "ok = isinstance(cbs[0], GPUUtilizationMonitor)" in out
    assert "logger = NeptuneLogger(project='p')" in out and "s2 = DataParallelStrategy()" in out
    for line in (
        "from lightning_mgpu.pl import DataParallelStrategy, ShardedStrategy",  # one statement per module
        "from lightning_mgpu.pl.callbacks import GPUUtilizationMonitor",
        "from lightning_mgpu.pl.loggers import NeptuneLogger",
    ):
        assert line in out.splitlines(), line
    assert "DDPSpawnShardedStrategy" not in out
    assert "GPUStatsMonitor(" not in out.replace("gpu-stats-monitor): GPUStatsMonitor(", "")


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
'''  # noqa: E501  (Lightning 1.x's one-line signature, as users copied it: the input as written)


def test_hooks_lose_what_2x_dropped_and_keep_what_they_use() -> None:
    out = upgraded(HOOKS)
    assert "def training_step(self, batch, batch_idx):" in out
    assert "def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):" in out
    assert "super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)" in out
    assert "def backward(self, loss, *args, **kwargs):" in out
    # test_step_end logs: kept, run after each step by LegacyStepEnds (test_step_ends.py), and with it the
    # reductions, which the mixin's combine_replica_outputs applies under dp in place of the bundle's own.
    assert "class M(LightningModule, LegacyStepEnds):" in out and TODO not in out
    for hook in ("training_step_end", "validation_step_end", "test_step_end"):
        assert f"def _{hook}_1x(self, outputs):" in out and f"def {hook}(" not in out
    # An epoch end that never read its outputs: renamed, nothing collected.
    assert "def on_validation_epoch_end(self):" in out and "validation_step_outputs" not in out


def test_optimizer_idx_in_use_stays_with_the_manual_optimization_todo() -> None:
    source = (
        "class GAN(LightningModule):\n"
        "    def training_step(self, batch, batch_idx, optimizer_idx):\n"
        "        if optimizer_idx == 0:\n"
        "            return 1\n"
    )
    result = upgrade_source(source)
    assert "def training_step(self, batch, batch_idx, optimizer_idx):" in result.source
    assert "optimizer-idx): training_step uses optimizer_idx" in result.source and result.todos[0].line == 2
    assert "self.automatic_optimization = False" in explain("optimizer-idx")


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


# -- what real 1.x code writes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # A variable or conditional gpus keeps its CPU path: the accelerator follows the same value.
        ("Trainer(gpus=args.gpus)", 'Trainer(accelerator="gpu" if args.gpus else "cpu", devices=args.gpus or 1)'),
        ("Trainer(gpus=(1 if cuda else 0))", 'Trainer(accelerator=("gpu" if cuda else "cpu"), devices=1)'),
        ("Trainer(gpus=n, num_processes=2)", 'Trainer(accelerator="gpu" if n else "cpu", devices=n or 2)'),
        ("Trainer(gpus=2, accelerator='auto')", "Trainer(devices=2, accelerator='auto')"),
        # A strategy held in a condition: None meant "no strategy".
        (
            "Trainer(accelerator='ddp' if n > 1 else None)",
            'Trainer(strategy="ddp" if n > 1 else "auto")',
        ),
        ("Trainer(distributed_backend=backend)", 'Trainer(strategy=backend or "auto")'),
        ("Trainer(precision=16 if cuda else 32)", 'Trainer(precision="16-mixed" if cuda else 32)'),
        # Mechanical finishes: nothing marked is left inside the call.
        ("Trainer(reload_dataloaders_every_epoch=True)", "Trainer(reload_dataloaders_every_n_epochs=1)"),
        ("Trainer(reload_dataloaders_every_epoch=False)", "Trainer()"),
        ("Trainer(checkpoint_callback=ckpt)", "Trainer(callbacks=[ckpt])"),
        ("Trainer(checkpoint_callback=ckpt, callbacks=[es])", "Trainer(callbacks=[es, ckpt])"),
        ("Trainer(progress_bar_refresh_rate=0)", "Trainer(enable_progress_bar=False)"),
        ("Trainer(max_steps=None)", "Trainer(max_steps=-1)"),
        ("Trainer(tpu_cores=8)", 'Trainer(accelerator="tpu", devices=8)'),
        # apex without precision=16 trained in fp32: the flag goes, precision stays.
        ("Trainer(amp_backend='apex', amp_level='O2')", "Trainer()"),
        (
            "Trainer(plugins=DDPPlugin(find_unused_parameters=False))",
            "Trainer(strategy=DDPPlugin(find_unused_parameters=False))",
        ),
    ],
)
def test_real_1x_values(before: str, after: str) -> None:
    out = upgraded(f"t = {before}\n")
    assert out.splitlines()[-1] == f"t = {after}", out
    assert rules.TODO_TAG not in out, out


@pytest.mark.parametrize(
    ("rate", "kept"), [("20", "callbacks=[TQDMProgressBar(refresh_rate=20)]"), ("-1", "progress_bar_refresh_rate=-1")]
)
def test_progress_bar_refresh_rate(rate: str, kept: str) -> None:
    """A positive rate becomes the callback's; a negative one meant nothing in 1.x and is left to a person."""
    out = upgraded(f"t = Trainer(progress_bar_refresh_rate={rate})\n")
    assert out.splitlines()[-1] == f"t = Trainer({kept})", out
    assert (rules.TODO_TAG in out) == (rate == "-1"), out


@pytest.mark.parametrize("above", ["", "# mine\n\n", '"""A script."""\n'])
def test_a_todo_on_a_files_first_statement_is_written_once(above: str) -> None:
    """libcst puts comments above a file's first statement in the module header: a rerun must find its TODO there."""
    once = upgrade_source(f"{above}t = Trainer(truncated_bptt_steps=2)\n").source
    assert once.count(TODO) == 1 and once.startswith(above), once
    assert upgrade_source(once).source == once


def test_gpus_conditional_keeps_the_cpu_path_when_it_runs() -> None:
    """The rewrite of gpus=<variable> gives 1.x's device choice for both values."""
    source = upgraded("t = Trainer(gpus=n, num_processes=2)\n")
    expression = source.split("Trainer(", 1)[1].rstrip(")\n")
    for n, expected in ((0, ("cpu", 2)), (2, ("gpu", 2)), (None, ("cpu", 2)), (1, ("gpu", 1))):
        kwargs = eval(f"dict({expression})", {"n": n})  # noqa: S307  (our own output, on literals)
        assert (kwargs["accelerator"], kwargs["devices"]) == expected, (n, kwargs)


def test_a_dict_of_settings_is_followed_into_the_trainer() -> None:
    source = """def make(n, cfg):
    kwargs = dict(gpus=n, checkpoint_callback=False)
    if n > 1:
        kwargs["distributed_backend"] = "ddp"
    else:
        kwargs["num_processes"] = 2  # CPU workers
    kwargs.update(precision=16)
    return Trainer(**kwargs)
"""
    out = upgraded(source)
    assert 'kwargs = dict(accelerator="gpu" if n else "cpu", devices=n or 1, enable_checkpointing=False)' in out
    assert '        kwargs["strategy"] = "ddp"\n' in out
    assert '        kwargs["accelerator"] = "cpu"\n        kwargs["devices"] = 2  # CPU workers\n' in out
    assert 'kwargs.update(precision="16-mixed")' in out and rules.TODO_TAG not in out


def test_a_module_level_dict_and_a_variable_backend() -> None:
    source = """ARGS = {"gpus": 1, "accelerator": "ddp2"}
def build(n):
    backend = "ddp" if n > 1 else "ddp_cpu"
    a = Trainer(**ARGS)
    return Trainer(accelerator=backend, num_processes=2)
"""
    out = upgraded(source)
    assert 'ARGS = {"accelerator": "gpu", "devices": 1, "strategy": "ddp2"}' in out
    assert '    backend = "ddp"\n' in out and "Trainer(strategy=backend" in out
    assert out.startswith("import lightning_mgpu")  # ddp2 is the bundle's


def test_a_backend_variable_used_elsewhere_is_not_rewritten() -> None:
    source = 'def build(n):\n    backend = "ddp_cpu"\n    log(backend)\n    return Trainer(accelerator=backend)\n'
    result = upgrade_source(source)
    # ddp_cpu needs accelerator="cpu" too: translated at run time (trainer-args-translated), with ddp_cpu's note.
    assert 'backend = "ddp_cpu"' in result.source and "legacy_trainer_kwargs(accelerator=backend" in result.source
    assert "NOTE(lightning-mgpu:ddp-cpu-gradient-mean)" in result.source


def test_argparse_trainers_keep_their_command_line() -> None:
    source = """from argparse import ArgumentParser
import pytorch_lightning as pl
from pytorch_lightning import Trainer

def main():
    parser = ArgumentParser()
    parser = Trainer.add_argparse_args(parser)
    parser = MyDataModule.add_argparse_args(parser)
    parser.set_defaults(replace_sampler_ddp=False)
    args = parser.parse_args()
    dm = MyDataModule.from_argparse_args(args)
    trainer = pl.Trainer.from_argparse_args(args, gpus=1, checkpoint_callback=False)
"""
    out = upgraded(source)
    assert "from lightning_mgpu.upgrade.trainer_args import add_argparse_args" in out
    assert "parser = add_argparse_args(Trainer, parser)" in out
    assert "parser = add_argparse_args(MyDataModule, parser)" in out
    assert "parser.set_defaults(use_distributed_sampler=False)" in out
    assert "dm = from_argparse_args(MyDataModule, args)" in out
    assert 'from_argparse_args(pl.Trainer, args, accelerator="gpu", devices=1, enable_checkpointing=False)' in out


def test_removed_names_and_modules() -> None:
    source = """import pytorch_lightning as pl
from pytorch_lightning.core.lightning import LightningModule
from pytorch_lightning.callbacks.base import Callback
from pytorch_lightning.loggers.base import LightningLoggerBase, rank_zero_experiment
from pytorch_lightning.utilities.seed import seed_everything
from pytorch_lightning.utilities.distributed import rank_zero_only
from pytorch_lightning.plugins import DDPPlugin, DDPSpawnPlugin, DeepSpeedPlugin
from pytorch_lightning.metrics import Accuracy, F1
from pytorch_lightning.loggers import TestTubeLogger

class L(LightningLoggerBase):
    pass

s = DDPSpawnPlugin(find_unused_parameters=False)
d = DeepSpeedPlugin(stage=2)
p = pl.plugins.DDPPlugin(find_unused_parameters=True)
pl.utilities.seed.seed_everything(1)
a = Accuracy(num_classes=10)
f = F1()
m = pl.metrics.functional.accuracy(x, y)
"""
    out = upgraded(source)
    for line in (
        "from pytorch_lightning import LightningModule, seed_everything",  # a name added joins its module's import
        "from pytorch_lightning.callbacks import Callback",
        "from pytorch_lightning.loggers import Logger, TensorBoardLogger",  # ... and test-tube-logger-args
        "from pytorch_lightning.loggers.logger import rank_zero_experiment",
        "from pytorch_lightning.utilities import rank_zero_only",
        "from torchmetrics import Accuracy, F1Score",
        "class L(Logger):",
        's = DDPStrategy(find_unused_parameters=False, start_method="spawn")',
        "d = DeepSpeedStrategy(stage=2)",
        "p = pl.strategies.DDPStrategy(find_unused_parameters=True)",
        "pl.seed_everything(1)",
        'a = Accuracy(task="multiclass", num_classes=10)',
        "m = legacy_accuracy(x, y)",  # the moved functional metric, its task inferred as 0.10 did
        "f = LegacyF1Score()",  # F1 renamed F1Score, then 0.10's micro F1 with the task read off the inputs
    ):
        assert line in out.splitlines(), (line, out)
    assert "metrics-task" not in out


def test_loop_keywords_hparams_and_tune() -> None:
    source = """class M(LightningModule):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams

def main(trainer, model, dl):
    trainer.fit(model, train_dataloader=dl, val_dataloaders=dl)
    trainer.test(model, test_dataloaders=dl)
    trainer.validate(model, val_dataloaders=dl)
    trainer.tune(model)
"""
    out = upgraded(source)
    assert "self.save_hyperparameters(hparams)" in out and "self.hparams =" not in out
    assert "trainer.fit(model, train_dataloaders=dl, val_dataloaders=dl)" in out
    assert "trainer.test(model, dataloaders=dl)" in out and "trainer.validate(model, dataloaders=dl)" in out
    assert "trainer-tune): trainer.tune() is gone" in out


EPOCH_ENDS = '''class M(LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self(batch)
        return loss

    def training_epoch_end(self, outputs):
        self.log("avg", torch.stack([o["loss"] for o in outputs]).mean())

    def validation_step(self, batch, batch_idx):
        if batch_idx > 10:
            return None
        return {"val_loss": self(batch)}

    def validation_epoch_end(self, val_outs):
        """Average."""
        self.log("val", torch.stack([o["val_loss"] for o in val_outs]).mean())

    def test_step(self, batch, batch_idx, dataloader_idx):
        return self(batch)

    def test_epoch_end(self, outputs):
        print(outputs)
'''


def test_epoch_end_hooks_collect_the_steps_outputs() -> None:
    out = upgraded(EPOCH_ENDS)
    # __init__ made where there was none, holding the lists.
    assert "    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n" in out
    assert "self.training_step_outputs = []" in out and "self.validation_step_outputs = []" in out
    # 1.x handed a bare training loss over as {"loss": loss}, detached.
    assert 'self.training_step_outputs.append(recursive_detach({"loss": loss}))\n        return loss' in out
    assert "from pytorch_lightning.utilities.memory import recursive_detach" in out
    assert (
        "    def on_train_epoch_end(self):\n        outputs, self.training_step_outputs = self.training_step_outputs,"
        " []" in out
    )
    # Every return of a value collects it once; returning None collects nothing (as 1.x skipped it).
    assert '            return None\n        step_output = {"val_loss": self(batch)}\n' in out
    assert (
        '    def on_validation_epoch_end(self):\n        """Average."""\n        val_outs, self.validation_step_outputs'
        in out
    )
    # A step with a loader index: collected per loader, handed over as 1.x did (a list per loader where there are
    # several, one flat list where there is one).
    assert "self.test_step_outputs = {}" in out
    assert "self.test_step_outputs.setdefault(dataloader_idx or 0, []).append(step_output)" in out
    assert (
        "    def on_test_epoch_end(self):\n"
        "        outputs = [self.test_step_outputs.get(i, []) for i in range(len(self.trainer.num_test_batches))]\n"
        "        self.test_step_outputs = {}\n"
        "        outputs = outputs[0] if len(outputs) == 1 else outputs\n" in out
    )
    assert "TODO" not in out


def test_epoch_end_conversion_runs_as_1x_did() -> None:
    """The converted module, driven like Lightning 2.x's loop, gives the epoch end what 1.x gave it."""
    torch = pytest.importorskip("torch")
    source = upgraded(EPOCH_ENDS.replace("LightningModule", "Base"))
    logged: dict[str, float] = {}

    class Base:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, batch):
            return batch.sum()

        def log(self, name, value):
            logged[name] = float(value)

    namespace = {"Base": Base, "torch": torch}
    exec(
        compile(source.replace("from pytorch_lightning.utilities.memory import recursive_detach\n", ""), "m", "exec"),
        {**namespace, "recursive_detach": lambda x: x, "__name__": "m"},
        namespace,
    )  # noqa: S102
    module = namespace["M"]()
    for epoch in range(2):
        for i in range(3):
            module.training_step(torch.tensor([float(i + epoch)]), i)
            module.validation_step(torch.tensor([2.0 * i]), i)
        module.on_train_epoch_end()
        module.on_validation_epoch_end()
        assert logged["avg"] == pytest.approx(1.0 + epoch) and logged["val"] == pytest.approx(2.0)
        assert module.training_step_outputs == [] and module.validation_step_outputs == []


EPOCH_END_FAMILY = """class Base(LightningModule):
    def training_epoch_end(self, outputs):
        self.means.append(torch.stack([o["loss"] for o in outputs]).mean().item())


class M(Base):
    def __init__(self):
        super().__init__()
        self.means, self.counts, self.val = [], [], []

    def training_step(self, batch, batch_idx):
        return self(batch)

    def training_epoch_end(self, outputs):
        super().training_epoch_end(outputs)
        self.counts.append(len(outputs))

    def validation_step(self, batch, batch_idx, loader):
        return self(batch)

    def validation_epoch_end(self, outputs):
        self.val.append(outputs)


class Other(Base):
    def training_step(self, batch, batch_idx):
        return {"loss": self(batch)}
"""


def _run_family(source: str, loaders: int) -> list[object]:
    """The converted classes driven like Lightning 2.x's loop for two epochs: what each epoch end recorded."""
    torch = pytest.importorskip("torch")

    class Trainer:
        num_val_batches = [3] * loaders

    class LightningModule:
        trainer = Trainer()

        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, batch):
            return batch.sum()

        def on_train_epoch_end(self):
            pass

    namespace = {"LightningModule": LightningModule, "torch": torch, "recursive_detach": lambda x: x}
    code = source.replace("from pytorch_lightning.utilities.memory import recursive_detach\n", "")
    exec(compile(code, "m", "exec"), namespace)  # noqa: S102
    module = namespace["M"]()
    for epoch in range(2):
        for i in range(3):
            module.training_step(torch.tensor([float(i + epoch)]), i)
            for loader in range(loaders):
                module.validation_step(torch.tensor([10.0 * loader + i]), i, loader)
        module.on_train_epoch_end()
        module.on_validation_epoch_end()
    return [
        module.means,
        module.counts,
        [[[float(t) for t in o] for o in v] if loaders > 1 else [float(t) for t in v] for v in module.val],
    ]


def test_an_epoch_end_in_a_base_class_aggregates_a_subclass_step() -> None:
    """A base class's training_epoch_end reached from the subclass through super(), and a validation step with a
    loader index: converted (no TODO), and computing what 1.x handed over."""
    out = upgraded(EPOCH_END_FAMILY)
    assert "TODO" not in out
    # The base takes the list its subclasses fill; its __init__ (made) holds it.
    assert (
        "class Base(LightningModule):\n    def __init__(self, *args, **kwargs):\n"
        "        super().__init__(*args, **kwargs)\n        self.training_step_outputs = []\n" in out
    )
    assert (
        "    def on_train_epoch_end(self):\n"
        "        outputs, self.training_step_outputs = self.training_step_outputs, []\n        self.means" in out
    )
    # The subclass hands its outputs on to the base's converted hook.
    assert "        self.training_step_outputs = outputs\n        super().on_train_epoch_end()\n" in out
    # A subclass with only a step collects for the base's hook.
    assert (
        "class Other(Base):\n    def training_step(self, batch, batch_idx):\n"  # no __init__: Base's makes the list
        '        step_output = {"loss": self(batch)}\n'
        "        self.training_step_outputs.append(recursive_detach(step_output))\n" in out
    )
    means, counts, val = _run_family(out, loaders=2)
    assert means == [1.0, 2.0] and counts == [3, 3]  # 1.x: {"loss": ...} per step, 3 steps an epoch
    assert val == [[[0.0, 1.0, 2.0], [10.0, 11.0, 12.0]]] * 2  # a list per loader
    assert _run_family(out, loaders=1)[2] == [[0.0, 1.0, 2.0]] * 2  # one loader: one flat list, as 1.x gave it


def test_an_epoch_end_family_that_cannot_be_followed_keeps_its_todo() -> None:
    # No step anywhere in the family.
    out = upgraded(
        "class Base(LightningModule):\n    def training_epoch_end(self, outputs):\n        self.n = len(outputs)\n"
    )
    assert "TODO(lightning-mgpu:epoch-end)" in out and "def training_epoch_end(self, outputs):" in out
    # A super call whose value is used.
    out = upgraded(
        EPOCH_END_FAMILY.replace(
            "        super().training_epoch_end(outputs)\n", "        x = super().training_epoch_end(outputs)\n"
        )
    )
    assert out.count("TODO(lightning-mgpu:epoch-end)") == 1 and "x = super().training_epoch_end(outputs)" in out


def test_callback_hooks_renamed_with_their_1x_reach() -> None:
    source = """class CB(Callback):
    def on_epoch_start(self, trainer, pl_module):
        self.n += 1

    def on_pretrain_routine_start(self, trainer, pl_module):
        pass

    def on_keyboard_interrupt(self, trainer, pl_module):
        save(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx):
        pass

    def on_init_start(self, trainer):
        pass

class M(LightningModule):
    def get_progress_bar_dict(self):
        return super().get_progress_bar_dict()
"""
    out = upgraded(source)
    assert "def on_train_epoch_start(self, trainer, pl_module):" in out
    assert "    on_validation_epoch_start = on_train_epoch_start" in out
    assert "    on_test_epoch_start = on_train_epoch_start" in out
    assert "def on_fit_start(self, trainer, pl_module):" in out
    assert (
        "def on_exception(self, trainer, pl_module, exception):\n        if isinstance(exception,"
        " KeyboardInterrupt):\n            save(pl_module)" in out
    )
    assert "def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):" in out
    assert "init-hooks): on_init_start is never called in 2.x" in out
    assert "class M(LightningModule, LegacyProgressBarDict):" in out  # progress-bar-dict: kept, shown at run time


def test_every_todo_names_a_rule_fits_a_line_and_is_explained() -> None:
    for rule in rules.RULES.values():
        text = rules.todo_text(
            rule.id, **{k: "x" * 12 for k in ("value", "old", "new", "hook", "keys", "name", "param", "node", "error")}
        )
        assert rule.kind == "rewrite" or len(f"    # {text}") <= 124, text  # a rewrite rule writes no comment
        head = {"todo": f"TODO(lightning-mgpu:{rule.id}): ", "note": f"NOTE(lightning-mgpu:{rule.id}): "}
        assert explain(rule.id).startswith(head.get(rule.kind, f"{rule.id} (a rewrite): ")), explain(rule.id)
        assert rule.text in explain(rule.id)
    assert explain("no-such-rule") is None


def test_the_summary_says_what_was_written() -> None:
    result = upgrade_source('t = Trainer(gpus=2, accelerator="auto")\n')
    messages = [f.message for f in result.changes]
    assert "gpus=2 -> devices=2" in messages and 'accelerator="auto" kept' in messages
    assert not any('accelerator="gpu"' in m for m in messages)


def test_1_0_logging_through_returned_dicts_becomes_log_dict() -> None:
    source = """class M(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self(batch)
        return {"loss": loss, "log": {"train_loss": loss}}

    def validation_step(self, batch, batch_idx):
        return {"val_loss": self(batch)}

    def validation_epoch_end(self, outputs):
        avg = torch.stack([x["val_loss"] for x in outputs]).mean()
        logs = {"val_loss": avg}
        return {"val_loss": avg, "log": logs, "progress_bar": logs}
"""
    out = upgraded(source)
    assert '        self.log_dict({"train_loss": loss})\n        return {"loss": loss}\n' in out
    # one dict in both entries: logged once (2.x raises where a hook logs a key twice with different arguments)
    assert "        self.log_dict(logs, prog_bar=True)\n        return {" in out and "self.log_dict(logs)\n" not in out
    assert '        return {"val_loss": avg}\n' in out and '"log":' not in out


def test_a_plain_module_keeps_its_own_hooks() -> None:
    """A hand-written loop's nn.Module may name its methods like Lightning's: they are its own, and stay."""
    source = (
        "class Net(nn.Module):\n"
        "    def __init__(self, hparams):\n        super().__init__()\n        self.hparams = hparams\n\n"
        "    def training_step(self, batch, batch_idx, optimizer_idx):\n        return batch\n\n"
        "    def training_epoch_end(self, outputs):\n        return {'log': outputs}\n"
    )
    assert upgraded(source) == source


def test_model_checkpoint_and_early_stopping_arguments() -> None:
    source = (
        "a = ModelCheckpoint(filepath='ckpts/{epoch}-{val_loss:.2f}', period=2, monitor='val_loss')\n"
        "b = ModelCheckpoint(filepath=os.path.join(out, '{epoch}'), every_n_val_epochs=1)\n"
        "c = ModelCheckpoint(prefix='run1', dirpath='x')\n"
        "t = Trainer(early_stop_callback=EarlyStopping(patience=3), callbacks=[a])\n"
        "u = Trainer(early_stop_callback=False)\n"
    )
    out = upgraded(source)
    assert (
        'a = ModelCheckpoint(dirpath="ckpts", filename="{epoch}-{val_loss:.2f}", every_n_epochs=2,'
        " monitor='val_loss')" in out
    )
    # a value the tool cannot read is split at run time, as 1.x split it (test_checkpoint_filepath.py)
    assert "b = ModelCheckpoint(**legacy_checkpoint_filepath(os.path.join(out, '{epoch}')), every_n_epochs=1)" in out
    assert out.startswith("from lightning_mgpu.upgrade.legacy_checkpoint import legacy_checkpoint_filepath\n")
    assert "checkpoint-prefix): ModelCheckpoint's prefix is gone" in out
    assert "t = Trainer(callbacks=[a, EarlyStopping(patience=3)])" in out and "u = Trainer()" in out


def test_auto_move_data_becomes_the_bundles_and_progress_bar_base_is_renamed() -> None:
    source = (
        "from pytorch_lightning.core.decorators import auto_move_data\n"
        "from pytorch_lightning.callbacks import ProgressBarBase\n"
        "class M(LightningModule):\n    @auto_move_data\n    def forward(self, x):\n        return x\n"
        "class Bar(ProgressBarBase):\n    pass\n"
    )
    out = upgraded(source, no_todo=True, no_unmarked=True)
    assert "from lightning_mgpu.upgrade.legacy_move import legacy_auto_move_data\n" in out
    assert "    @legacy_auto_move_data\n    def forward(self, x):" in out  # test_legacy_move.py: what it does
    assert "from pytorch_lightning.callbacks import ProgressBar\n" in out and "class Bar(ProgressBar):" in out


def test_a_star_import_from_the_removed_metrics_package_comes_from_torchmetrics() -> None:
    out = upgraded(
        "from pytorch_lightning.metrics import *\n"
        "from pytorch_lightning.metrics.functional import *\n"
        "from pytorch_lightning.callbacks import *\n"
    )
    assert out.splitlines() == [
        "from torchmetrics import *",
        "from torchmetrics.functional import *",
        "from pytorch_lightning.callbacks import *",  # a module 2.x still has: left alone
    ]


PER_SAMPLE_STEP_END = """class M(LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        if batch_idx < 0:
            return None
        return {"loss": F.cross_entropy(self(x), y, reduction="none")}

    def training_step_end(self, outputs):
        return {"loss": outputs["loss"].mean()}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step_end(self, outputs):
        return outputs.mean()
"""


def test_a_step_end_that_means_per_sample_losses_keeps_running_after_its_step() -> None:
    """A step with ``reduction="none"`` returns one loss per sample, which 1.x's training_step_end meaned (found by
    tests/helpers/upgrade_equivalence/dp_step_end.py beside Lightning 1.9.5: with the hook deleted, 2.x's backward
    got a vector). The reduction is kept and applied to each return; a step of scalars still loses its step end."""
    out = upgraded(PER_SAMPLE_STEP_END)
    assert 'return self._training_step_end_1x({"loss": F.cross_entropy(self(x), y, reduction="none")})' in out
    assert "return None" in out  # a bare None is left as 1.x skipped the step with it
    assert "def _training_step_end_1x(self, outputs):" in out and "def training_step_end" not in out
    assert "validation_step_end" not in out
    assert upgraded(out) == out


def test_ddp_cpu_gets_a_note_that_1x_summed_the_ranks_gradients() -> None:
    """Measured beside Lightning 1.6.5 (tests/helpers/upgrade_equivalence/ddp_cpu_spawn.py): its ddp_cpu stepped with
    the sum of the two ranks' gradients, the converted ddp with their mean; the rewrite says so where it is made."""
    out = upgraded('t = Trainer(num_processes=2, accelerator="ddp_cpu")\n')
    assert out == (
        "# NOTE(lightning-mgpu:ddp-cpu-gradient-mean): 1.x's ddp_cpu summed the ranks' gradients; 2.x's ddp takes"
        ' their mean\nt = Trainer(accelerator="cpu", devices=2, strategy="ddp")\n'
    )
    assert "ddp-cpu-gradient-mean" not in upgraded(
        'from pytorch_lightning import Trainer\nTrainer(accelerator="ddp")\n'
    )


@pytest.mark.parametrize(
    ("namespace", "bundle"), [("pytorch_lightning", "lightning_mgpu.pl"), ("lightning.pytorch", "lightning_mgpu")]
)
def test_terminate_on_nan_becomes_the_bundles_callback_in_the_files_namespace(namespace: str, bundle: str) -> None:
    out = upgraded(
        f"import {namespace} as pl\n"
        "t = pl.Trainer(terminate_on_nan=True, max_epochs=2)\n"
        "u = pl.Trainer(terminate_on_nan=False, callbacks=[cb])\n"
        "v = pl.Trainer(terminate_on_nan=flag)\n"
    )
    assert f"from {bundle}.callbacks import TerminateOnNaN\n" in out
    assert "t = pl.Trainer(callbacks=[TerminateOnNaN()], max_epochs=2)\n" in out
    assert "u = pl.Trainer(callbacks=[cb])\n" in out  # False was 1.x's default
    # A value the tool cannot read: tested for truth when the Trainer is built, as 1.x did.
    assert "v = pl.Trainer(callbacks=[*([TerminateOnNaN()] if flag else [])])\n" in out
    assert "TODO(lightning-mgpu:trainer-terminate-on-nan)" not in out


def test_stochastic_weight_avg_becomes_the_bundles_legacy_swa() -> None:
    out = upgraded(
        "import pytorch_lightning as pl\n"
        "t = pl.Trainer(stochastic_weight_avg=True, callbacks=[cb])\n"
        "u = pl.Trainer(stochastic_weight_avg=False)\n"
        "v = pl.Trainer(stochastic_weight_avg=config.swa)\n"
    )
    assert "from lightning_mgpu.pl.callbacks import LegacyStochasticWeightAveraging\n" in out
    assert "t = pl.Trainer(callbacks=[cb, LegacyStochasticWeightAveraging()])\n" in out
    assert "u = pl.Trainer()\n" in out
    assert "v = pl.Trainer(callbacks=[*([LegacyStochasticWeightAveraging()] if config.swa else [])])\n" in out
    assert "TODO(lightning-mgpu:trainer-swa)" not in out
    # callbacks= the tool cannot extend keeps the TODO.
    kept = upgraded(
        "import pytorch_lightning as pl\nv = pl.Trainer(stochastic_weight_avg=config.swa, callbacks=make())\n"
    )
    assert kept.count("TODO(lightning-mgpu:trainer-swa)") == 1
