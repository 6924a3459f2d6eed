"""``FSDP2Strategy`` in process: its options, checkpoint formats, precision plugins and full-checkpoint gather (the
launched checks are in tests/integration/strategies/fsdp2/test_fsdp2.py)."""

from __future__ import annotations

import pickle
import warnings

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn

import lightning_mgpu  # noqa: F401
from lightning_mgpu.plugins import FSDP2MixedPrecision, FSDP2Precision, ShardAwareGradScaler
from lightning_mgpu.strategies import FSDP2Strategy, ZeroStrategy
from lightning_mgpu.strategies.fsdp2.sharding import apply_fully_shard
from lightning_mgpu.strategies.fsdp2.state import GATHER_ENV, gathers_by_hand


def test_the_environment_forces_or_forbids_the_full_tensor_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    module = nn.Linear(2, 2)
    monkeypatch.delenv(GATHER_ENV, raising=False)
    assert not gathers_by_hand(module)  # CPU parameters, no process group: DCP's gather
    monkeypatch.setenv(GATHER_ENV, "1")
    assert gathers_by_hand(module)
    monkeypatch.setenv(GATHER_ENV, "0")
    assert not gathers_by_hand(module)


def test_checkpoint_format_and_policies_are_checked_before_any_work() -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy

    assert FSDP2Strategy().checkpoint_format == "sharded"
    assert ZeroStrategy().checkpoint_format == "full"  # Lightning 1.x's one file
    assert FSDP2Strategy(checkpoint_format="full").checkpoint_format == "full"
    with pytest.raises(ValueError, match="checkpoint_format='zip'\\) is not supported; choose one of"):
        FSDP2Strategy(checkpoint_format="zip")  # type: ignore[arg-type]
    # The ZeRO-style engines write their optimizer shards into a folder when asked (not by default).
    assert ZeroStrategy(checkpoint_format="sharded").checkpoint_format == "sharded"
    assert ZeroStrategy().restore_checkpoint_after_setup  # a folder loads into the sharded optimizers
    with pytest.raises(
        ValueError,
        match=r"FSDP2Strategy\(async_save=True\) writes sharded folders in the background; pass"
        r" checkpoint_format='sharded'",
    ):
        FSDP2Strategy(checkpoint_format="full", async_save=True)
    with pytest.raises(ValueError, match="FSDP2Strategy\\(offload_policy=CPUOffloadPolicy\\(\\)\\) needs a GPU"):
        apply_fully_shard(nn.Linear(2, 2), 1, "cpu", False, None, offload_policy=CPUOffloadPolicy())


def test_options_are_kept_as_given() -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    strategy = FSDP2Strategy(reshard_after_forward=True, fsdp_modules=[nn.Linear, "net.*"], mp_policy=policy)
    assert strategy.reshard_after_forward and strategy.mp_policy is policy and len(strategy.fsdp_modules or []) == 2
    assert strategy.shards_gradients and strategy._ddp_kwargs == {}


def test_precision_plugins_are_fsdp2s_own_and_picklable() -> None:
    trainer = pl.Trainer(
        strategy="sharded_fsdp2", accelerator="cpu", devices=2, logger=False, enable_progress_bar=False
    )
    assert type(trainer.precision_plugin) is FSDP2Precision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available" from the scaler on this machine
        plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=512.0))
        strategy = FSDP2Strategy(precision_plugin=plugin)
    built = strategy.precision_plugin
    assert (
        type(built) is FSDP2MixedPrecision and type(plugin) is MixedPrecision
    )  # a new object, the stock one as it was
    assert isinstance(built.scaler, ShardAwareGradScaler) and built.scaler.get_scale() == 512.0
    assert type(pickle.loads(pickle.dumps(strategy)).precision_plugin) is FSDP2MixedPrecision


def test_tied_weights_stay_in_the_roots_group_by_default() -> None:
    """A GPT ties its output head to its token embedding: ``fully_shard`` refuses one parameter in two groups, so by
    default both modules stay with the root, and every other module with parameters gets its own group."""
    from lightning_mgpu.strategies.fsdp2.sharding import default_blocks

    tokens, head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    head.weight = tokens.weight
    model = nn.ModuleDict({"tokens": tokens, "block": nn.Linear(4, 4), "norm": nn.LayerNorm(4), "head": head})
    assert [name for name, _ in default_blocks(model)] == ["block", "norm"]
    untied = nn.ModuleDict({"tokens": nn.Embedding(10, 4), "head": nn.Linear(4, 10, bias=False)})
    assert [name for name, _ in default_blocks(untied)] == ["tokens", "head"]


def test_a_checkpoint_from_before_the_engine_classes_resumes_its_grad_scaler() -> None:
    """Until 889f4d2 every sharded engine's plugin was ``ShardedMixedPrecision``, and Lightning files the grad scaler's
    state under the plugin's class name: an FSDP2 or ZeRO checkpoint of that time would resume with a fresh scale."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available" from the scaler on this machine
        plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
        fsdp2, zero = FSDP2Strategy(precision_plugin=plugin), ZeroStrategy(precision_plugin=plugin)
    old = {"state_dict": {}, "ShardedMixedPrecision": {"scale": 8.0, "_growth_tracker": 3}}
    assert fsdp2._adopt_legacy_precision_state(dict(old))["FSDP2MixedPrecision"] == old["ShardedMixedPrecision"]
    assert zero._adopt_legacy_precision_state(dict(old))["MixedPrecision"] == old["ShardedMixedPrecision"]
    new = {"FSDP2MixedPrecision": {"scale": 2.0}, "ShardedMixedPrecision": {"scale": 8.0}}
    assert fsdp2._adopt_legacy_precision_state(dict(new))["FSDP2MixedPrecision"] == {"scale": 2.0}  # its own wins
