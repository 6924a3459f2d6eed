"""``ShardedStrategy`` (FairScale) and ``ZeroStrategy`` in process: names, options, precision plugins, optimizer
rebuilding, FairScale hooks.

The FairScale pieces run on a real one-rank gloo process group (world size 1 is enough to exercise
``no_sync``, the unreduced-parameter check and hook removal); multi-rank behaviour is in
``test_sharded_integration.py``.
"""

from __future__ import annotations

import pickle
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from torch import nn

import lightning_mgpu  # noqa: F401
from lightning_mgpu.plugins.precision.fairscale import (
    ShardedMixedPrecision,
    ShardedPrecision,
)
from lightning_mgpu.strategies import FSDP2Strategy, ShardedStrategy, ZeroStrategy
from lightning_mgpu.strategies.sharded.optim import rebuild_optimizer
from lightning_mgpu.utilities.imports import MissingDependencyError
from lightning_mgpu.utilities.optimizers import local_optimizer, local_optimizer_state_bytes, rebind_scheduler


def _trainer(strategy: object, **kwargs: object) -> pl.Trainer:
    return pl.Trainer(
        strategy=strategy, accelerator="cpu", devices=2, logger=False, enable_progress_bar=False, **kwargs
    )


@pytest.mark.parametrize(
    ("name", "start_method"),
    [("sharded", "popen"), ("sharded_spawn", "spawn"), ("ddp_sharded", "popen"), ("ddp_sharded_spawn", "spawn")],
)
def test_names_build_a_sharded_strategy(name: str, start_method: str) -> None:
    strategy = _trainer(name).strategy
    assert type(strategy) is ShardedStrategy and strategy._start_method == start_method
    assert isinstance(strategy.precision_plugin, ShardedPrecision)


def test_missing_fairscale_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fairscale", None)  # makes `import fairscale` fail
    with pytest.raises(MissingDependencyError, match=r"pip install 'fairscale==0.4.13' \(the \[sharded\] extra"):
        ShardedStrategy()
    ZeroStrategy()  # the torch engines do not need it
    FSDP2Strategy()


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (
            ShardedStrategy,
            {"static_graph": True},
            r"\['static_graph'\] that fairscale's ShardedDataParallel.*ZeroStrategy",
        ),
        (ShardedStrategy, {"reduce_buffer_size": -1}, ">= 0"),
        (ZeroStrategy, {"reduce_fp16": True}, r"\['reduce_fp16'\] that torch.nn.parallel.DistributedDataParallel"),
        (ZeroStrategy, {"model_averaging_period": 4}, "post-local SGD"),
        (ShardedStrategy, {"backend": "torch"}, r"backend='torch'\) is gone.*ZeroStrategy\(\).*FSDP2Strategy\(\)"),
    ],
)
def test_wrapper_options_each_engine_does_not_take_are_rejected(cls: type, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


@pytest.mark.parametrize(
    ("cls", "option"),
    [
        (ZeroStrategy, "reduce_buffer_size"),
        (ZeroStrategy, "broadcast_fp16"),
        (FSDP2Strategy, "find_unused_parameters"),
        (FSDP2Strategy, "reduce_buffer_size"),
        (ShardedStrategy, "backend"),
        (ShardedStrategy, "fsdp_modules"),
    ],
)
def test_each_engine_takes_only_its_own_options(cls: type, option: str) -> None:
    # One class per engine: another engine's option is not in the signature (nothing to refuse per engine).
    import inspect

    assert option not in inspect.signature(cls).parameters
    with pytest.raises((TypeError, ValueError), match=option):
        cls(**{option: 1})


def test_options_reach_the_wrapper() -> None:
    # FairScale's options go to ShardedDataParallel (the wrapper _wrap_model builds), none to DDP.
    fairscale = ShardedStrategy(reduce_fp16=True, broadcast_buffers=False)
    assert fairscale.sdp_kwargs == {"reduce_fp16": True, "broadcast_buffers": False} and fairscale._ddp_kwargs == {}
    zero = ZeroStrategy(find_unused_parameters=True, static_graph=False)
    assert zero._ddp_kwargs == {"find_unused_parameters": True, "static_graph": False} and zero.find_unused_parameters
    assert ZeroStrategy()._ddp_kwargs == {"find_unused_parameters": False}


def test_precision_plugins_are_each_engines_own_and_picklable() -> None:
    assert isinstance(_trainer("sharded", precision="bf16-mixed").precision_plugin, ShardedMixedPrecision)
    assert _trainer("sharded", precision="bf16-mixed").precision_plugin.scaler is None
    # torch's ZeRO-1 all-reduces the full gradients: Lightning's own plugin and scaler are right for it.
    assert type(_trainer("sharded_zero").precision_plugin) is Precision
    assert type(_trainer("sharded_zero", precision="bf16-mixed").precision_plugin) is MixedPrecision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available" from the scalers on this machine
        from fairscale.optim.grad_scaler import ShardedGradScaler

        plugin = MixedPrecision("16-mixed", "cuda")
        strategy = ShardedStrategy(precision_plugin=plugin)
        built = strategy.precision_plugin
        assert isinstance(built, ShardedMixedPrecision) and isinstance(built.scaler, ShardedGradScaler)
        # A new plugin with the stock one's settings: the stock object is not changed in place.
        assert type(plugin) is MixedPrecision and type(plugin.scaler) is torch.amp.GradScaler
        assert (built.precision, built.device) == ("16-mixed", "cuda")
        strategy.precision_plugin = built  # assigned again (Lightning's connector does): kept as it is
        assert strategy.precision_plugin is built
    # sharded_spawn pickles the strategy with its plugin into the workers.
    assert type(pickle.loads(pickle.dumps(strategy)).precision_plugin) is ShardedMixedPrecision


def test_rebuild_keeps_class_hyperparameters_groups_state_and_scheduler() -> None:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    opt = torch.optim.AdamW(
        [{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 0.5}], lr=0.1, weight_decay=0.3
    )
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)

    calls = []

    def factory(groups: list[dict], cls: type, defaults: dict) -> torch.optim.Optimizer:
        calls.append((cls, defaults))
        return cls(groups, **defaults)  # a stand-in for OSS/ZeRO: same signature contract

    new = rebuild_optimizer(opt, factory, "fairscale")
    assert calls[0][0] is torch.optim.AdamW and calls[0][1]["weight_decay"] == 0.3
    assert [g["lr"] for g in new.param_groups] == [0.1, 0.5] and new.param_groups is not opt.param_groups
    assert local_optimizer_state_bytes(new) == local_optimizer_state_bytes(opt) > 0  # the state came along
    rebind_scheduler(sched, {id(opt): new})
    assert sched.optimizer is new and hasattr(new.step, "_wrapped_by_lr_sched")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "optimizer.step() has been overridden" / "called before" warning
        new.step()
        sched.step()
    assert [g["lr"] for g in new.param_groups] == pytest.approx([0.01, 0.05])
    assert not isinstance(new, ZeroRedundancyOptimizer) and local_optimizer(new) is new


def test_rebuild_explains_optimizers_it_cannot_rebuild() -> None:
    class NeedsSize(torch.optim.SGD):
        def __init__(self, params: object, model_size: int, lr: float = 0.1) -> None:
            super().__init__(params, lr=lr / model_size)

    def factory(groups: list[dict], cls: type, defaults: dict) -> torch.optim.Optimizer:
        return cls(groups, **defaults)

    with pytest.raises(TypeError, match="NeedsSize.*Record every constructor argument in the optimizer's `defaults`"):
        rebuild_optimizer(NeedsSize(nn.Linear(2, 2).parameters(), model_size=4), factory, "fairscale")


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    if dist.is_initialized():
        pytest.skip("a process group already exists in this test process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class _TwoHeads(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.unused_head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _sharded_setup(strategy: ShardedStrategy, module: pl.LightningModule) -> tuple[object, object]:
    from lightning_mgpu.strategies.sharded.fairscale import OSS, make_oss, wrap_module

    opt = rebuild_optimizer(torch.optim.SGD(module.parameters(), lr=0.1), make_oss(False), "fairscale")
    assert isinstance(opt, OSS)
    sdp = wrap_module(module, [opt], reduce_buffer_size=0)
    strategy._lightning_module = module
    strategy.model = sdp
    strategy.cluster_environment = LightningEnvironment()
    strategy.accelerator = CPUAccelerator()
    return sdp, opt


def test_block_backward_sync_skips_reduction_and_hooks_are_removed(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    strategy = ShardedStrategy()
    module = _TwoHeads()
    module.unused_head.requires_grad_(False)
    sdp, _ = _sharded_setup(strategy, module)
    reduces = []
    original = dist.reduce
    monkeypatch.setattr(dist, "reduce", lambda *a, **k: reduces.append(1) or original(*a, **k))

    with strategy.block_backward_sync():
        sdp(torch.randn(2, 4)).sum().backward()
    assert reduces == []
    sdp(torch.randn(2, 4)).sum().backward()
    assert len(reduces) == 2  # body.weight and body.bias, each reduced to its owner
    strategy.post_backward(torch.tensor(0.0))  # every trainable parameter was reduced: no error

    strategy.teardown()
    assert strategy.model is module
    reduces.clear()
    module(torch.randn(2, 4)).sum().backward()  # the hooks are gone with the wrapper
    assert reduces == []


def test_a_parameter_without_gradient_fails_with_the_fix(one_rank_group: None) -> None:
    strategy = ShardedStrategy()
    module = _TwoHeads()
    sdp, _ = _sharded_setup(strategy, module)
    loss = sdp(torch.randn(2, 4)).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"unused_head\.weight.*find_unused_parameters=True"):
        strategy.post_backward(loss)
    strategy.teardown()


def test_find_unused_parameters_reduces_everything(one_rank_group: None) -> None:
    strategy = ShardedStrategy(find_unused_parameters=True)
    module = _TwoHeads()
    sdp, _ = _sharded_setup(strategy, module)
    from lightning_mgpu.strategies.sharded.fairscale import (
        params_not_reduced,
        reduce_in_fixed_order,
    )

    with sdp.no_sync():
        sdp(torch.randn(2, 4)).sum().backward()
    reduce_in_fixed_order(sdp)
    assert params_not_reduced(sdp) == []
    assert torch.count_nonzero(module.unused_head.weight.grad) == 0  # counted as a zero gradient
    strategy.teardown()


def test_knob_defaults_resolve_as_documented(one_rank_group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """reduce_buffer_size: 0 on one node, 2**23 on several; broadcast_fp16: on for 16-mixed across nodes."""
    from lightning_mgpu.strategies.sharded import fairscale as sharded_fairscale

    wrapped: dict[str, object] = {}
    monkeypatch.setattr(
        sharded_fairscale, "wrap_module", lambda module, optimizers, **kwargs: wrapped.update(kwargs) or module
    )

    def resolved(num_nodes: int, precision: str | None = None, **kwargs: object) -> tuple[object, bool]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "CUDA is not available" from the 16-mixed scaler on this machine
            plugin = MixedPrecision(precision, "cuda") if precision else None  # type: ignore[arg-type]
            strategy = ShardedStrategy(precision_plugin=plugin, **kwargs)  # type: ignore[arg-type]
        strategy.num_nodes = num_nodes
        module = _TwoHeads()
        # What setup() does: OSS from the strategy's factory, then ShardedDataParallel with the resolved knobs.
        strategy.optimizers = [
            strategy._optimizer_factory()([{"params": list(module.parameters())}], torch.optim.SGD, {"lr": 0.1})
        ]
        strategy.model = module
        wrapped.clear()
        strategy._wrap_model()
        return wrapped["reduce_buffer_size"], strategy.optimizers[0].broadcast_fp16  # type: ignore[attr-defined]

    assert resolved(1) == (0, False)
    assert resolved(2) == (2**23, False)
    assert resolved(2, "16-mixed") == (2**23, True)
    assert resolved(1, "16-mixed") == (0, False)
    assert resolved(2, "bf16-mixed") == (2**23, False)  # only 16-mixed turns it on (Lightning 1.x's rule)
    # Explicit values win over the defaults.
    assert resolved(2, "16-mixed", reduce_buffer_size=0, broadcast_fp16=False) == (0, False)
    assert resolved(1, reduce_buffer_size=2**10, broadcast_fp16=True) == (2**10, True)


class _Gan(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.gen, self.disc = nn.Linear(2, 4), nn.Linear(4, 1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.gen(z)


@pytest.mark.parametrize("find_unused_parameters", [False, True])
def test_each_backward_reduces_the_parameters_toggle_model_left_trainable(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch, find_unused_parameters: bool
) -> None:
    """A GAN's two backward passes in one training_step (one wrapper forward) each reduce their own half."""
    from lightning_mgpu.strategies.sharded.fairscale import params_not_reduced

    strategy = ShardedStrategy(find_unused_parameters=find_unused_parameters)
    module = _Gan()
    sdp, _ = _sharded_setup(strategy, module)
    # The precision plugin's backward calls the Trainer's hooks on the module.
    module.trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    module.trainer.strategy.connect(module)
    reduced: list[torch.Tensor] = []
    original = dist.reduce
    monkeypatch.setattr(dist, "reduce", lambda tensor, *a, **k: reduced.append(tensor) or original(tensor, *a, **k))

    fake = sdp(torch.randn(3, 2))  # one wrapper forward (in Lightning: the whole training_step)
    phases = (
        (module.gen, module.disc, lambda: module.disc(fake).sum()),  # the generator's step
        (module.disc, module.gen, lambda: module.disc(fake.detach()).sum()),  # the discriminator's step
    )
    for trained, frozen, loss in phases:
        frozen.requires_grad_(False)  # what toggle_model does
        before = [p.grad if p.grad is None else p.grad.clone() for p in frozen.parameters()]
        reduced.clear()
        strategy.backward(loss(), None)  # used to fail for the frozen half, or to reduce nothing the second time
        assert {t.data_ptr() for t in reduced} == {p.grad.data_ptr() for p in trained.parameters()}  # type: ignore[union-attr]
        assert params_not_reduced(sdp) == []
        for param, grad in zip(frozen.parameters(), before):  # neither reduced nor zero-filled
            assert param.grad is None if grad is None else torch.equal(param.grad, grad)
        frozen.requires_grad_(True)
    strategy.teardown()
