"""``lightning_mgpu.pl``: the bundle for ``pytorch_lightning``, beside ``lightning.pytorch`` in one environment.

In this process (both distributions are installed here, as ``scripts/setup_env.sh`` sets them up); the import orders
and the two-process fits under both namespaces are in ``tests/integration/utilities/test_namespaces.py``.
"""

from __future__ import annotations

import inspect

import lightning.pytorch as lp
import pytest

import lightning_mgpu
from lightning_mgpu.strategies import BUNDLE_STRATEGY_NAMES
from lightning_mgpu.utilities import namespaces

pl = pytest.importorskip("pytorch_lightning")
twin = pytest.importorskip("lightning_mgpu.pl")


def test_every_bundle_name_builds_a_pytorch_lightning_strategy() -> None:
    for name in BUNDLE_STRATEGY_NAMES:
        assert name in pl.strategies.StrategyRegistry, name
        strategy = pl.strategies.StrategyRegistry[name]["strategy"]
        assert issubclass(strategy, pl.strategies.Strategy) and not issubclass(strategy, lp.strategies.Strategy), name
        assert strategy.__module__.startswith("lightning_mgpu.pl."), name
    # Lightning's own validation accepts the name and the instance (it refused both before the twin).
    assert isinstance(pl.Trainer(strategy="dp", accelerator="cpu", logger=False).strategy, twin.DataParallelStrategy)
    trainer = pl.Trainer(strategy=twin.ZeroStrategy(), accelerator="cpu", devices=2, logger=False)
    assert isinstance(trainer.strategy, pl.strategies.DDPStrategy)


def test_lightning_pytorch_keeps_its_own_classes() -> None:
    for name in BUNDLE_STRATEGY_NAMES:
        strategy = lp.strategies.StrategyRegistry[name]["strategy"]
        assert issubclass(strategy, lp.strategies.Strategy) and strategy.__module__.startswith(
            "lightning_mgpu.strategies"
        )
    assert lightning_mgpu.DataParallelStrategy is not twin.DataParallelStrategy


def test_every_public_class_has_a_twin_on_pytorch_lightnings_bases() -> None:
    from lightning_mgpu.pl import callbacks as pl_callbacks
    from lightning_mgpu.pl import loggers as pl_loggers

    from lightning_mgpu import callbacks, loggers

    for name, cls in inspect.getmembers(callbacks, inspect.isclass):
        if issubclass(cls, lp.Callback):
            twin_cls = getattr(pl_callbacks, name)
            assert issubclass(twin_cls, pl.Callback) and not issubclass(twin_cls, lp.Callback), name
    assert issubclass(pl_loggers.NeptuneLogger, pl.loggers.Logger) and issubclass(
        loggers.NeptuneLogger, lp.loggers.Logger
    )
    from lightning_mgpu.pl.plugins.precision.fairscale import ShardedMixedPrecision

    assert issubclass(ShardedMixedPrecision, pl.plugins.precision.Precision)


def test_modules_that_do_not_reach_lightning_are_shared_not_copied() -> None:
    import lightning_mgpu.pl.data.fingerprint as pl_fingerprint
    import lightning_mgpu.pl.utilities.namespaces as pl_namespaces

    import lightning_mgpu.data.fingerprint as fingerprint

    assert "lightning_mgpu.data.fingerprint" not in namespaces.twinned_modules()
    assert pl_fingerprint is fingerprint and pl_namespaces is namespaces  # one module state
    assert pl_fingerprint.__spec__.name == "lightning_mgpu.data.fingerprint"  # the alias left the original intact
    assert {
        "lightning_mgpu",
        "lightning_mgpu.strategies.dp.strategy",
        "lightning_mgpu.callbacks",
    } <= namespaces.twinned_modules()


def test_twin_source_rewrites_namespaces_and_bundle_imports_only() -> None:
    source = (
        "import lightning.pytorch as pl\n"
        "from lightning.fabric.utilities import x\n"
        "from lightning_mgpu.strategies import A\n"
        "    import lightning_mgpu  # registers\n"
        "MSG = \"pip install 'lightning_mgpu[sharded]' (lightning_mgpu.data)\"\n"
    )
    assert namespaces.twin_source(source) == (
        "import pytorch_lightning as pl\n"
        "from lightning_fabric.utilities import x\n"
        "from lightning_mgpu.pl.strategies import A\n"
        "    import lightning_mgpu.pl as lightning_mgpu  # registers\n"
        "MSG = \"pip install 'lightning_mgpu[sharded]' (lightning_mgpu.data)\"\n"
    )


def test_the_callbacks_factory_entry_point_is_declared_for_both_trainers() -> None:
    from importlib.metadata import entry_points

    for group, target in (
        ("lightning.pytorch.callbacks_factory", "lightning_mgpu.callbacks.factory"),
        ("pytorch_lightning.callbacks_factory", "lightning_mgpu.pl.callbacks.factory"),
    ):
        (entry,) = [e for e in entry_points(group=group) if e.name == "lightning_mgpu"]
        assert entry.value == f"{target}:callbacks_factory"
        assert callable(entry.load())


def test_the_package_requires_neither_lightning_distribution_and_offers_each_as_an_extra() -> None:
    """A user with pytorch-lightning alone must not get lightning pulled in by installing the bundle (and the
    reverse)."""
    import tomllib

    from lightning_mgpu.utilities._compat import LIGHTNING_MIN
    from tests.helpers.launch import REPO_ROOT

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    names = [dep.split(">")[0].split("=")[0].split("<")[0].strip().lower() for dep in project["dependencies"]]
    assert "lightning" not in names and "pytorch-lightning" not in names
    extras = project["optional-dependencies"]
    assert extras["lightning"] == [f"lightning>={LIGHTNING_MIN},<2.7,!=2.6.2,!=2.6.3"]
    assert extras["pytorch-lightning"] == [f"pytorch-lightning>={LIGHTNING_MIN},<2.7,!=2.6.2,!=2.6.3"]
