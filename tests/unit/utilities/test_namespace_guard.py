"""A Trainer of one Lightning namespace handed the other namespace's strategy, accelerator or plugin refuses it by
name, pointing at the import that matches (``lightning_mgpu/utilities/namespace_guard.py``)."""

from __future__ import annotations

import lightning.pytorch as lp
import pytest
from lightning.fabric.plugins.environments import LightningEnvironment

import lightning_mgpu
from lightning_mgpu.utilities.namespace_guard import foreign_namespace
from lightning_mgpu.utilities.namespaces import MixedLightningNamespacesError

pl = pytest.importorskip("pytorch_lightning")
twin = pytest.importorskip("lightning_mgpu.pl")

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


def test_bundle_strategy_of_the_other_namespace_names_the_twin() -> None:
    with pytest.raises(MixedLightningNamespacesError, match=r"from lightning_mgpu\.pl import DataParallelStrategy"):
        pl.Trainer(strategy=lightning_mgpu.DataParallelStrategy(), accelerator="cpu", **QUIET)
    with pytest.raises(MixedLightningNamespacesError, match=r"from lightning_mgpu import ZeroStrategy"):
        lp.Trainer(strategy=twin.ZeroStrategy(), accelerator="cpu", devices=2, **QUIET)


def test_lightning_classes_of_the_other_namespace_name_the_package() -> None:
    with pytest.raises(
        MixedLightningNamespacesError, match=r"DDPStrategy from `pytorch_lightning` instead of `lightning\.pytorch`"
    ):
        pl.Trainer(strategy=lp.strategies.DDPStrategy(), accelerator="cpu", **QUIET)
    with pytest.raises(
        MixedLightningNamespacesError, match=r"from `lightning\.pytorch` instead of `pytorch_lightning`"
    ):
        lp.Trainer(accelerator=pl.accelerators.CPUAccelerator(), **QUIET)
    with pytest.raises(MixedLightningNamespacesError, match=r"plugins=Precision"):
        pl.Trainer(plugins=[lp.plugins.precision.Precision()], accelerator="cpu", **QUIET)
    # lightning.fabric's counterpart is lightning_fabric (not pytorch_lightning).
    with pytest.raises(MixedLightningNamespacesError, match=r"from `lightning_fabric` instead of `lightning\.fabric`"):
        pl.Trainer(plugins=LightningEnvironment(), accelerator="cpu", **QUIET)


def test_matching_namespaces_and_names_pass() -> None:
    assert isinstance(
        pl.Trainer(strategy=twin.DataParallelStrategy(), accelerator="cpu", **QUIET).strategy, twin.DataParallelStrategy
    )
    assert isinstance(
        lp.Trainer(strategy=lightning_mgpu.DataParallelStrategy(), accelerator="cpu", **QUIET).strategy,
        lightning_mgpu.DataParallelStrategy,
    )
    # A lightning.fabric plugin is lightning.pytorch's own; a name resolves in either registry.
    assert lp.Trainer(plugins=[LightningEnvironment()], accelerator="cpu", **QUIET)
    assert isinstance(pl.Trainer(strategy="dp", accelerator="cpu", **QUIET).strategy, twin.DataParallelStrategy)


def test_foreign_namespace_ignores_what_is_not_lightnings() -> None:
    assert foreign_namespace("dp") is None and foreign_namespace(None) is None and foreign_namespace(object()) is None
    assert foreign_namespace(lp.strategies.DDPStrategy()) is None
    assert foreign_namespace(pl.strategies.DDPStrategy()) == "pytorch_lightning"


def test_the_guard_is_installed_once() -> None:
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector

    before = _AcceleratorConnector._check_config_and_set_final_flags
    lightning_mgpu.register_bundle_strategies()
    assert _AcceleratorConnector._check_config_and_set_final_flags is before
