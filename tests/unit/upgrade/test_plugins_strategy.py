"""A 1.x training-type plugin given in ``plugins=`` is the strategy, as 1.x's accelerator connector took it: at run time
(``legacy_trainer_kwargs``, hence ``from_argparse_args``) and for a ``plugins=NAME`` whose name only some assignments
give a plugin (rule ``trainer-args-translated``). Checked with a real 2.x Trainer on the CPU (built, not run)."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from lightning_mgpu.testing.trainer import QUIET
from lightning_mgpu.upgrade.trainer_args import from_argparse_args, legacy_trainer_kwargs
from tests.helpers.upgrade_check import upgraded


@pytest.fixture
def pl():  # noqa: ANN201
    module = pytest.importorskip("pytorch_lightning")
    import lightning_mgpu  # noqa: F401  (registers the bundle's strategy names)

    return module


def test_a_strategy_object_in_plugins_becomes_the_strategy(pl) -> None:
    from pytorch_lightning.plugins.environments import LightningEnvironment

    ddp = pl.strategies.DDPStrategy(find_unused_parameters=True)
    alone = legacy_trainer_kwargs({"plugins": ddp, "accelerator": "cpu"}, namespace="pytorch_lightning")
    assert alone == {"strategy": ddp, "accelerator": "cpu"}
    assert pl.Trainer(**alone, **QUIET).strategy is ddp
    # In a list beside another plugin: the strategy moves, the other plugin stays where it was.
    environment, ddp = LightningEnvironment(), pl.strategies.DDPStrategy()  # a Trainer sets up its strategy: a new one
    kwargs = legacy_trainer_kwargs({"plugins": [environment, ddp], "gpus": 0}, namespace="pytorch_lightning")
    assert kwargs["plugins"] == [environment] and kwargs["strategy"] is ddp
    trainer = pl.Trainer(**kwargs, **QUIET)
    assert trainer.strategy is ddp and trainer.strategy.cluster_environment is environment
    # accelerator="ddp" beside it: the plugin refined the backend string in 1.x.
    assert legacy_trainer_kwargs({"plugins": [ddp], "accelerator": "ddp"}) == {"strategy": ddp}


def test_a_strategy_name_in_plugins_becomes_the_strategy(pl) -> None:
    kwargs = legacy_trainer_kwargs({"plugins": "ddp_find_unused_parameters_false"}, namespace="pytorch_lightning")
    assert kwargs == {"strategy": "ddp_find_unused_parameters_false"}
    assert type(pl.Trainer(accelerator="cpu", **kwargs, **QUIET).strategy).__name__ == "DDPStrategy"
    assert legacy_trainer_kwargs({"plugins": "ddp_sharded", "accelerator": "ddp"}) == {"strategy": "ddp_sharded"}
    assert legacy_trainer_kwargs({"plugins": "my_own_plugin"}) == {"plugins": "my_own_plugin"}  # not a strategy


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"strategy": "ddp_spawn"}, "plugins= holds the strategy DDPStrategy, and strategy='ddp_spawn' is given too"),
        ({"plugins_also": "deepspeed"}, "plugins= holds two strategies (DDPStrategy, deepspeed)"),
    ],
)
def test_a_strategy_in_plugins_beside_another_is_refused(pl, params: dict, message: str) -> None:
    ddp = pl.strategies.DDPStrategy()
    plugins = [ddp, params.pop("plugins_also")] if "plugins_also" in params else ddp
    with pytest.raises(ValueError, match="choose one|pass one as strategy=") as err:
        legacy_trainer_kwargs({"plugins": plugins, **params}, namespace="pytorch_lightning")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_from_argparse_args_takes_the_plugin_as_the_strategy(pl) -> None:
    ddp = pl.strategies.DDPStrategy(find_unused_parameters=False)
    args = argparse.Namespace(max_epochs=2, gpus=0)
    trainer = from_argparse_args(pl.Trainer, args, plugins=ddp, **QUIET)
    assert trainer.strategy is ddp and trainer.max_epochs == 2


BRANCHES = """import pytorch_lightning as pl
from pytorch_lightning.plugins import DDPPlugin


def build(opt):
    if opt.cpu_only:
        extra = None
    elif opt.plugin_name is None:
        extra = DDPPlugin(find_unused_parameters=False)
    else:
        extra = opt.plugin_name
    return pl.Trainer(gpus=opt.gpus, max_epochs=3, plugins=extra, logger=False, enable_checkpointing=False)


def build_one_line(opt):
    extra = DDPPlugin(find_unused_parameters=False) if opt.distributed else None
    return pl.Trainer(max_epochs=1, plugins=extra, logger=False, enable_checkpointing=False)
"""


def test_a_plugins_variable_that_may_hold_a_plugin_is_translated_at_run_time() -> None:
    out = upgraded(BRANCHES, no_todo=True, no_unmarked=True)
    assert "DDPStrategy(find_unused_parameters=False)" in out
    assert (
        "pl.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, **legacy_trainer_kwargs(gpus=opt.gpus,"
        ' plugins=extra, namespace="pytorch_lightning"))'
    ) in out, out
    assert (
        "pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **legacy_trainer_kwargs(plugins=extra,"
        ' namespace="pytorch_lightning"))'
    ) in out


@pytest.mark.parametrize(
    ("opt", "strategy"),
    [
        ({"cpu_only": True, "plugin_name": None, "gpus": 0}, "SingleDeviceStrategy"),
        ({"cpu_only": False, "plugin_name": None, "gpus": 0}, "DDPStrategy"),  # the plugin: the strategy
        ({"cpu_only": False, "plugin_name": "ddp_find_unused_parameters_false", "gpus": None}, "DDPStrategy"),
    ],
)
def test_the_converted_branches_build_the_trainer_1x_built(pl, opt: dict, strategy: str) -> None:
    namespace: dict[str, object] = {}
    exec(compile(upgraded(BRANCHES, no_todo=True, no_unmarked=True), "<converted>", "exec"), namespace)  # noqa: S102
    trainer = namespace["build"](argparse.Namespace(**opt))  # type: ignore[operator]
    assert type(trainer.strategy).__name__ == strategy and trainer.max_epochs == 3
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"
    one_line = namespace["build_one_line"](argparse.Namespace(distributed=True))  # type: ignore[operator]
    assert type(one_line.strategy).__name__ == "DDPStrategy" and not one_line.strategy._ddp_kwargs.get(
        "find_unused_parameters", False
    )


def test_a_variable_that_always_holds_a_plugin_is_strategy_as_before() -> None:
    source = (
        "from pytorch_lightning.plugins import DDPPlugin\nextra = DDPPlugin()\nt = Trainer(gpus=2, plugins=extra)\n"
    )
    assert upgraded(source, no_todo=True, no_unmarked=True).endswith(
        't = Trainer(accelerator="gpu", devices=2, strategy=extra)\n'
    )
