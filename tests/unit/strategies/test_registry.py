"""The bundle's strategy names resolve through Lightning's own registry.

The in-process tests; the ones that launch processes are in ``tests/integration/strategies/test_registry.py``.
"""

from __future__ import annotations

import pytest
from lightning.fabric.strategies.registry import _StrategyRegistry
from lightning.pytorch.strategies import (
    DDPStrategy,
    SingleDeviceStrategy,
    StrategyRegistry,
)

import lightning_mgpu
from lightning_mgpu.strategies import (
    BUNDLE_STRATEGY_NAMES,
    DataParallelStrategy,
    DDP2Strategy,
    FSDP2Strategy,
    HorovodStrategy,
    ShardedStrategy,
    StrategyNameClashError,
    ZeroStrategy,
    register_bundle_strategies,
)

EXPECTED = {
    "dp": DataParallelStrategy,
    "ddp2": DDP2Strategy,
    "horovod": HorovodStrategy,
    "sharded": ShardedStrategy,
    "sharded_spawn": ShardedStrategy,
    "sharded_notebook": ShardedStrategy,
    "ddp_sharded": ShardedStrategy,
    "ddp_sharded_spawn": ShardedStrategy,
    "ddp_sharded_find_unused_parameters_false": ShardedStrategy,
    "ddp_sharded_spawn_find_unused_parameters_false": ShardedStrategy,
    "sharded_find_unused_parameters_true": ShardedStrategy,
    "sharded_spawn_find_unused_parameters_true": ShardedStrategy,
    "sharded_zero": ZeroStrategy,
    "sharded_zero_spawn": ZeroStrategy,
    "sharded_zero_notebook": ZeroStrategy,
    "sharded_fsdp2": FSDP2Strategy,
    "sharded_fsdp2_spawn": FSDP2Strategy,
    "sharded_fsdp2_notebook": FSDP2Strategy,
}


def test_every_bundle_name_resolves_to_its_class() -> None:
    assert set(BUNDLE_STRATEGY_NAMES) == set(EXPECTED)
    for name, cls in EXPECTED.items():
        assert StrategyRegistry[name]["strategy"] is cls, name
        assert StrategyRegistry[name]["description"], f"{name} has no description"


def test_spawn_variants_are_launched_like_ddp_spawn() -> None:
    assert StrategyRegistry["sharded"]["init_params"].get("start_method", "popen") == "popen"
    assert StrategyRegistry["ddp_sharded"]["init_params"] == StrategyRegistry["sharded"]["init_params"]
    assert StrategyRegistry["sharded_spawn"]["init_params"]["start_method"] == "spawn"
    assert StrategyRegistry["ddp_sharded_spawn"]["init_params"] == StrategyRegistry["sharded_spawn"]["init_params"]


@pytest.mark.parametrize("name", ["sharded_notebook", "sharded_zero_notebook", "sharded_fsdp2_notebook"])
def test_notebook_variants_fork_like_ddp_notebook(name: str) -> None:
    """A notebook's model lives in ``__main__``, which a spawned worker cannot import: these fork, as Lightning's
    ``ddp_notebook`` does, and their launcher says it works in an interactive session."""
    strategy = StrategyRegistry.get(name)
    assert strategy._start_method == "fork"
    assert "launched like ddp_notebook" in StrategyRegistry[name]["description"]
    from lightning.fabric.plugins.environments import LightningEnvironment

    strategy.cluster_environment = LightningEnvironment()  # what the Trainer gives it before the launcher is made
    strategy._configure_launcher()
    assert strategy.launcher is not None and strategy.launcher.is_interactive_compatible


@pytest.mark.parametrize(
    "name", ["sharded", "sharded_spawn", "ddp_sharded_spawn", "sharded_zero", "sharded_fsdp2_spawn"]
)
def test_other_variants_refuse_an_interactive_session_naming_the_notebook_one(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.fabric.utilities import imports
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    monkeypatch.setattr(imports, "_IS_INTERACTIVE", True)
    strategy = StrategyRegistry.get(name)
    notebook = {"ShardedStrategy": "sharded_notebook", "ZeroStrategy": "sharded_zero_notebook"}.get(
        type(strategy).__name__, "sharded_fsdp2_notebook"
    )
    with pytest.raises(MisconfigurationException, match=f"use strategy='{notebook}'") as refused:
        strategy._configure_launcher()
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("name", "start_method", "find_unused"),
    [
        ("ddp_sharded_find_unused_parameters_false", "popen", False),  # Lightning 1.9's spellings
        ("ddp_sharded_spawn_find_unused_parameters_false", "spawn", False),
        ("sharded_find_unused_parameters_true", "popen", True),  # Lightning 2.x's pattern
        ("sharded_spawn_find_unused_parameters_true", "spawn", True),
    ],
)
def test_find_unused_parameters_spellings_build_the_strategy_they_name(
    name: str, start_method: str, find_unused: bool
) -> None:
    from lightning.pytorch import Trainer

    strategy = Trainer(strategy=name, accelerator="cpu", devices=2, logger=False).strategy
    assert isinstance(strategy, ShardedStrategy)
    assert strategy._start_method == start_method and strategy.find_unused_parameters is find_unused


def test_lightning_1_9_names_for_dp_horovod_and_sharded_are_all_registered() -> None:
    # The 1.9 registry's entries for these families (its test_available_strategies_in_registry and strategy files).
    lightning_1_9 = {
        "dp",
        "horovod",
        "ddp_sharded",
        "ddp_sharded_spawn",
        "ddp_sharded_find_unused_parameters_false",
        "ddp_sharded_spawn_find_unused_parameters_false",
    }
    assert lightning_1_9 <= set(StrategyRegistry.available_strategies())


def test_lightning_own_names_are_untouched() -> None:
    lightning_own = {n for n, e in StrategyRegistry.items() if e["strategy"].__module__.startswith("lightning.")}
    assert {"ddp", "ddp_spawn", "fsdp", "deepspeed"} <= lightning_own
    assert not lightning_own & set(BUNDLE_STRATEGY_NAMES)  # (a clash would raise at import: register_strategy)
    for name in ("ddp", "ddp_spawn"):
        assert StrategyRegistry[name]["strategy"] is DDPStrategy
    assert StrategyRegistry["single_device"]["strategy"] is SingleDeviceStrategy


def test_registering_again_is_harmless() -> None:
    snapshot = {k: dict(v) for k, v in StrategyRegistry.items()}
    names = register_bundle_strategies()
    register_bundle_strategies()
    assert sorted(names) == sorted(BUNDLE_STRATEGY_NAMES)
    assert {k: dict(v) for k, v in StrategyRegistry.items()} == snapshot


def test_clashing_name_raises_with_the_fix() -> None:
    registry = _StrategyRegistry()

    class SomeoneElsesStrategy(SingleDeviceStrategy):
        pass

    registry.register("dp", SomeoneElsesStrategy, description="not ours")
    with pytest.raises(StrategyNameClashError, match=r"'dp'.*SomeoneElsesStrategy.*DataParallelStrategy\(") as err:
        register_bundle_strategies(registry)
    assert "StrategyRegistry.remove('dp')" in str(err.value)
    assert registry["dp"]["strategy"] is SomeoneElsesStrategy  # the other package's entry is left alone


def test_same_class_with_other_arguments_clashes() -> None:
    registry = _StrategyRegistry()
    registry.register("sharded_spawn", ShardedStrategy, description="x", start_method="popen")
    with pytest.raises(StrategyNameClashError, match="sharded_spawn"):
        register_bundle_strategies(registry)


def test_unknown_strategy_name_is_rejected_by_lightning() -> None:
    from lightning.pytorch import Trainer

    with pytest.raises(ValueError, match="invalid strategy name"):
        Trainer(strategy="not_a_strategy", accelerator="cpu", devices=1, logger=False)
    assert lightning_mgpu.__version__


@pytest.mark.parametrize(
    ("name", "start_method"),
    [("sharded_fsdp2", "popen"), ("sharded_fsdp2_spawn", "spawn"), ("sharded_fsdp2_notebook", "fork")],
)
def test_fsdp2_names_build_the_fsdp2_strategy(name: str, start_method: str) -> None:
    from lightning.pytorch.strategies import StrategyRegistry

    strategy = StrategyRegistry.get(name)
    assert type(strategy) is FSDP2Strategy
    assert strategy._start_method == start_method


def test_the_light_name_table_matches_what_the_classes_register() -> None:
    """Command lines validate names from lightning_mgpu.utilities.strategy_names (no Lightning import): it must be
    exactly what the classes register, in order, with the sharded and FSDP2 names right."""
    from lightning.pytorch.strategies import StrategyRegistry

    from lightning_mgpu.strategies import BUNDLE_STRATEGY_NAMES
    from lightning_mgpu.strategies._sharded_base import ShardedBase
    from lightning_mgpu.utilities import strategy_names

    assert strategy_names.BUNDLE_STRATEGY_NAMES == BUNDLE_STRATEGY_NAMES
    sharded = {n for n in BUNDLE_STRATEGY_NAMES if issubclass(StrategyRegistry[n]["strategy"], ShardedBase)}
    assert strategy_names.SHARDED_NAMES == sharded
    fsdp2 = {n for n in sharded if StrategyRegistry[n]["strategy"] is FSDP2Strategy}
    assert strategy_names.FSDP2_NAMES == fsdp2
