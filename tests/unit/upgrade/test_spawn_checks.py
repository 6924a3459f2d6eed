"""A 1.x DDP spawn class named in a check (rule ``spawn-isinstance``): ``isinstance(s, DDPSpawnStrategy)`` ->
``legacy_is_ddp_spawn(s)``, which says what 1.x's check said of the strategy 2.x built in its place."""

from __future__ import annotations

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from tests.helpers.upgrade_check import upgraded

GUARDED_SETUP = """from pytorch_lightning import LightningDataModule
from pytorch_lightning.strategies import DDPSpawnStrategy, SingleDeviceStrategy


class ShardLoader(LightningDataModule):
    def prepare_data(self):
        plan = self.trainer.strategy
        if not isinstance(plan, (SingleDeviceStrategy, DDPSpawnStrategy)):
            raise RuntimeError(f"only {SingleDeviceStrategy.__name__} or {DDPSpawnStrategy.__name__}: got {plan}")
        self.spawned = isinstance(self.trainer.strategy, DDPSpawnStrategy)
        self.named = f'{DDPSpawnStrategy.__name__}'
"""


def test_the_checks_become_the_helper_and_the_name_a_string() -> None:
    out = upgraded(GUARDED_SETUP, no_todo=True, no_unmarked=True)
    assert "from lightning_mgpu.upgrade.legacy_spawn import legacy_is_ddp_spawn" in out, out
    assert "if not (isinstance(plan, (SingleDeviceStrategy,)) or legacy_is_ddp_spawn(plan)):" in out, out
    assert "{SingleDeviceStrategy.__name__} or {'DDPSpawnStrategy'}: got {plan}\")" in out, out
    assert "self.spawned = legacy_is_ddp_spawn(self.trainer.strategy)" in out, out
    assert "self.named = f'{\"DDPSpawnStrategy\"}'" in out, out


@pytest.mark.parametrize(
    "check",
    [
        "isinstance(make_strategy(), (SingleDeviceStrategy, DDPSpawnStrategy))",  # the subject read twice: a call
        "isinstance(s, (DDPSpawnShardedStrategy,))",  # 1.x checked the sharded one alone
    ],
)
def test_other_shapes_keep_the_todo(check: str) -> None:
    source = (
        "from pytorch_lightning.strategies import DDPSpawnStrategy, SingleDeviceStrategy, DDPSpawnShardedStrategy\n"
        f"def f(s, make_strategy):\n    return {check}\n"
    )
    out = upgraded(source)
    assert "TODO(lightning-mgpu:spawn-class-use)" in out and "legacy_is_ddp_spawn" not in out, out


def test_a_tuple_with_the_class_it_became_only_drops_it() -> None:
    out = upgraded(
        "from pytorch_lightning.strategies import DDPSpawnStrategy, DDPStrategy\n"
        "x = isinstance(s, (DDPStrategy, DDPSpawnStrategy))\n",
        no_todo=True,
    )
    assert "x = isinstance(s, (DDPStrategy,))" in out and "legacy_is_ddp_spawn" not in out, out


@pytest.mark.parametrize("namespace", ["lightning.pytorch", "pytorch_lightning"])
def test_the_helper_answers_as_1x_isinstance(namespace: str) -> None:
    """1.x: True for ddp_spawn, ddp_fork, ddp_notebook (DDPSpawnStrategy with a start method) and its subclasses
    (the sharded spawn one); False for ddp (DDPStrategy), DeepSpeed (a DDPStrategy subclass), a single device."""
    import importlib

    from lightning_mgpu.upgrade.legacy_spawn import legacy_is_ddp_spawn

    strategies = importlib.import_module(f"{namespace}.strategies")
    for start in ("spawn", "fork", "forkserver"):
        assert legacy_is_ddp_spawn(strategies.DDPStrategy(start_method=start))
    registry = strategies.StrategyRegistry
    for name in ("ddp_spawn", "ddp_fork", "ddp_notebook"):
        assert legacy_is_ddp_spawn(registry.get(name))
    assert not legacy_is_ddp_spawn(registry.get("ddp"))
    assert not legacy_is_ddp_spawn(strategies.DDPStrategy())
    assert not legacy_is_ddp_spawn(strategies.SingleDeviceStrategy("cpu"))
    assert not legacy_is_ddp_spawn(object())
    bundle = importlib.import_module("lightning_mgpu.upgrade.rules").BUNDLE_FOR_NAMESPACE[namespace]
    sharded = importlib.import_module(f"{bundle}.strategies").ShardedStrategy
    assert legacy_is_ddp_spawn(sharded(start_method="spawn")) and not legacy_is_ddp_spawn(sharded())
