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
    # Lightning restores before setup, as under ddp (the hooks run before configure_optimizers); a folder is held back.
    assert not ZeroStrategy().restore_checkpoint_after_setup
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
    """A GPT ties its output head to its token embedding: ``fully_shard`` refuses one parameter in two groups, so both
    modules stay with the root, whatever their size; at ``min_params=0`` every other module gets a group."""
    from lightning_mgpu.strategies.fsdp2.sharding import default_blocks

    tokens, head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    head.weight = tokens.weight
    model = nn.ModuleDict({"tokens": tokens, "block": nn.Linear(4, 4), "norm": nn.LayerNorm(4), "head": head})
    assert [name for name, _ in default_blocks(model, min_params=0)] == ["block", "norm"]
    assert [name for name, _ in default_blocks(model, min_params=1)] == ["block", "norm"]
    untied = nn.ModuleDict({"tokens": nn.Embedding(10, 4), "head": nn.Linear(4, 10, bias=False)})
    assert [name for name, _ in default_blocks(untied, min_params=0)] == ["tokens", "head"]
    # A parent holding one side of a tie is not closed either: the tie stays with the root.
    wrapped = nn.ModuleDict({"stem": nn.Sequential(tokens), "head": head})
    assert default_blocks(wrapped, min_params=0) == []


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc, self.bn = nn.Linear(width, width, bias=False), nn.BatchNorm1d(width)


class _Encoder(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block(width) for _ in range(depth))
        self.norm = nn.LayerNorm(width)


def test_whole_blocks_by_size() -> None:
    """Top down: a small module joins the enclosing group, a block reaching ``min_params`` is one group whole (its
    BatchNorm inside it), containers and modules holding repeated blocks are split."""
    from lightning_mgpu.strategies.fsdp2.sharding import DEFAULT_MIN_PARAMS, default_blocks

    # _Block(100): 10,000 + 200 parameters; _Block(200): 40,000 + 400.
    model = nn.Sequential(_Block(100), _Block(100), nn.Sequential(_Block(200), _Block(200)), nn.Linear(200, 2))
    assert [n for n, _ in default_blocks(model, min_params=40_300)] == ["2.0", "2.1"]
    assert [n for n, _ in default_blocks(model, min_params=10_100)] == ["0", "1", "2.0", "2.1"]
    assert [n for n, _ in default_blocks(model, min_params=0)] == ["0", "1", "2.0", "2.1", "3"]
    assert default_blocks(model) == [] and DEFAULT_MIN_PARAMS == 1_000_000  # 101,604 in all: the root's one group
    # An encoder holds its layers: split into them, its own LayerNorm joining the root's group.
    encoder = nn.Sequential(_Encoder(200, 3), nn.Linear(200, 2))
    assert [n for n, _ in default_blocks(encoder, min_params=40_000)] == ["0.layers.0", "0.layers.1", "0.layers.2"]
    # One layer is no repetition: the encoder stays whole.
    assert [n for n, _ in default_blocks(nn.Sequential(_Encoder(200, 1)), min_params=40_000)] == ["0"]


def test_default_groups_of_resnet50_and_gpt2_small() -> None:
    """The two real models of the GPU benchmark, built on the meta device: whole blocks, the tie with the root."""
    from benchmarks.harness.networks import GPT, ResNet
    from lightning_mgpu.strategies.fsdp2.sharding import default_blocks

    with torch.device("meta"):
        resnet, gpt = ResNet(), GPT()
    assert [n for n, _ in default_blocks(resnet)] == [f"blocks.{i}" for i in range(7, 16)] + ["head"]
    assert [n for n, _ in default_blocks(gpt)] == [f"blocks.{i}" for i in range(12)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_params": -1}, "whole number of parameters >= 0"),
        ({"min_params": 1.5}, "whole number of parameters >= 0"),
        ({"min_params": 10, "fsdp_modules": [nn.Linear]}, "Pass one of them"),
    ],
)
def test_min_params_is_checked(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FSDP2Strategy(**kwargs)


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


@pytest.mark.parametrize("averaging", ["swa", "ema"])
def test_weight_averaging_is_refused_before_anything_is_sharded(averaging: str, tmp_path) -> None:
    """Lightning's SWA and EMA guard against its own FSDP and DeepSpeed classes only; under this strategy they failed
    after the first epoch inside torch's AveragedModel ("got mixed torch.Tensor and DTensor")."""
    from lightning.pytorch import callbacks
    from lightning.pytorch.demos.boring_classes import BoringModel
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    from lightning_mgpu.strategies.fsdp2.sharding import is_fully_sharded

    if averaging == "ema" and not hasattr(callbacks, "EMAWeightAveraging"):
        pytest.skip("EMAWeightAveraging is Lightning 2.6's")
    callback = (
        callbacks.StochasticWeightAveraging(swa_lrs=0.1) if averaging == "swa" else callbacks.EMAWeightAveraging()
    )
    model = BoringModel()
    trainer = pl.Trainer(
        strategy=FSDP2Strategy(),
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    name = type(callback).__name__
    with pytest.raises(MisconfigurationException, match=rf"^{name} cannot average .* strategy='sharded_fsdp2'"):
        trainer.fit(model)
    assert not is_fully_sharded(model) and trainer.global_step == 0


@pytest.mark.parametrize(
    ("strategy", "callback", "match"),
    [
        ("sharded_fsdp2_spawn", "swa", r"^StochasticWeightAveraging cannot average .* strategy='sharded_fsdp2'"),
        ("sharded_zero_spawn", "batch_size_finder", r"^The Batch size finder is not supported with distributed"),
    ],
)
def test_a_spawn_variant_refuses_before_it_starts_a_worker(strategy: str, callback: str, match: str, tmp_path) -> None:
    """The refusal of the fit's set-up, in one line from the launching process: from a worker it came back wrapped in
    torch.multiprocessing's ProcessRaisedException and the worker's traceback."""
    from lightning.pytorch import callbacks
    from lightning.pytorch.demos.boring_classes import BoringModel
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    made = (
        callbacks.StochasticWeightAveraging(swa_lrs=0.1)
        if callback == "swa"
        else callbacks.BatchSizeFinder(mode="power", init_val=2, max_trials=2)
    )
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator="cpu",
        devices=2,
        max_epochs=1,
        callbacks=[made],
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
    )
    with pytest.raises(MisconfigurationException, match=match):
        trainer.fit(BoringModel())
    assert trainer.strategy.launcher.procs == []  # no worker was started
