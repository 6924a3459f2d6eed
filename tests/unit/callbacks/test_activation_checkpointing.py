"""ActivationCheckpointing: selection, exact gradients, memory, checkpoints, Lightning's setup order, strategies.

The in-process tests; the ones that launch processes are in
``tests/integration/callbacks/test_activation_checkpointing.py``.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.strategies import SingleDeviceStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_mgpu.callbacks import ActivationCheckpointing
from tests.helpers.runif import RunIf
from tests.helpers.trainer import quiet_trainer

IMPLS = ["torch", pytest.param("fairscale", marks=RunIf(fairscale=True).marks)]


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.fc1, self.drop, self.bn, self.fc2 = (
            nn.Linear(width, 4 * width),
            nn.Dropout(0.2),
            nn.BatchNorm1d(4 * width),
            nn.Linear(4 * width, width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.bn(self.drop(torch.relu(self.fc1(x)))))


class Net(nn.Module):
    def __init__(self, depth: int = 4, width: int = 16) -> None:
        super().__init__()
        self.net = nn.Module()
        self.net.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.enc = nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.1, batch_first=True)
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.net.blocks(x).unsqueeze(1))).sum()


def names(selected: list[tuple[str, nn.Module]]) -> list[str]:
    return [n for n, _ in selected]


def test_select_by_class_pattern_and_predicate() -> None:
    net = Net()
    assert names(ActivationCheckpointing([nn.TransformerEncoderLayer]).select(net)) == ["enc"]
    blocks = ["net.blocks.0", "net.blocks.1", "net.blocks.2", "net.blocks.3"]
    # '*' also matches dots; nested matches (net.blocks.0.fc1, ...) collapse into their outermost match.
    assert names(ActivationCheckpointing(["net.blocks.*"]).select(net)) == blocks
    assert names(ActivationCheckpointing([lambda m: isinstance(m, Block)]).select(net)) == blocks
    assert names(ActivationCheckpointing([lambda name, m: name.endswith(".fc1")]).select(net)) == [
        b + ".fc1" for b in blocks
    ]
    assert names(ActivationCheckpointing(["net.blocks.*", nn.TransformerEncoderLayer]).select(net)) == [*blocks, "enc"]
    # Selective checkpointing: every k-th match (k, 2k, ...).
    assert names(ActivationCheckpointing(["net.blocks.*"], every_k=2).select(net)) == ["net.blocks.1", "net.blocks.3"]
    assert names(ActivationCheckpointing("net.blocks.1").select(net)) == ["net.blocks.1"]  # a bare spec is accepted


def test_pattern_that_matches_nothing_lists_close_names() -> None:
    with pytest.raises(
        ValueError, match=r"pattern 'net.block.\*' matched no submodule of Net\. Close names: 'net.blocks"
    ) as err:
        ActivationCheckpointing(["net.block.*"]).select(Net())
    assert "fnmatch" in str(err.value)
    with pytest.raises(ValueError, match=r"no submodule of Net is an instance of Conv2d\. Present classes: .*Linear"):
        ActivationCheckpointing([nn.Conv2d]).select(Net())
    with pytest.raises(ValueError, match="predicate .* returned False for every submodule"):
        ActivationCheckpointing([lambda m: False]).select(Net())
    with pytest.raises(ValueError, match=r"every_k=9\) selects nothing: 4 module\(s\) can be checkpointed"):
        ActivationCheckpointing(["net.blocks.*"], every_k=9).select(Net())
    with pytest.raises(ValueError, match=r"in-place modules are never checkpointed: 1"):
        ActivationCheckpointing([nn.ReLU]).select(nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True)))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"modules": []}, ValueError, "checkpoints nothing"),
        ({"modules": [3]}, TypeError, "cannot select modules with 3"),
        ({"modules": [int]}, TypeError, "int is not an nn.Module subclass"),
        ({"modules": [" "]}, ValueError, "empty pattern"),
        ({"modules": ["a"], "every_k": 0}, ValueError, "every_k must be an integer >= 1"),
        ({"modules": ["a"], "impl": "deepspeed"}, ValueError, "impl must be 'torch' or 'fairscale'"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ActivationCheckpointing(**kwargs)


def test_module_with_a_patched_instance_forward_is_refused() -> None:
    net = Net()
    net.head.forward = lambda x: x  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="its `forward` was replaced on the instance"):
        ActivationCheckpointing(["head"]).apply(net)


def _grads_and_buffers(
    net: nn.Module, x: torch.Tensor, autocast: bool
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(1234)  # the same dropout masks in both runs
    # backward outside autocast, as Lightning's precision plugins run it and torch's AMP docs ask (under torch 2.6, a
    # backward *inside* CPU autocast through FairScale's recompute leaves the checkpointed parameters without .grad).
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = net(x)
    loss.backward()
    return [p.grad.clone() for p in net.parameters()], [b.clone() for b in net.buffers()]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_gradients_are_exact(impl: str, autocast: bool) -> None:
    torch.manual_seed(0)
    plain = Net()
    checkpointed = copy.deepcopy(plain)
    ActivationCheckpointing(["net.blocks.*", nn.TransformerEncoderLayer], impl=impl).apply(checkpointed)
    x = torch.randn(8, 16)
    grads, buffers = _grads_and_buffers(plain, x, autocast)
    grads_ac, buffers_ac = _grads_and_buffers(checkpointed, x, autocast)
    for g, g_ac in zip(grads, grads_ac):
        torch.testing.assert_close(g_ac, g, atol=1e-6, rtol=0)
    # BatchNorm running statistics were updated once, as without checkpointing.
    for b, b_ac in zip(buffers, buffers_ac):
        torch.testing.assert_close(b_ac, b, atol=0, rtol=0)


class SharedNormBlock(nn.Module):
    """One BatchNorm called twice in a forward, with a cumulative average (momentum=None reads num_batches_tracked)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.bn = nn.Linear(8, 8), nn.BatchNorm1d(8, momentum=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(self.bn(x)))


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, *RunIf(min_cuda_gpus=1).marks])]
)
def test_batchnorm_statistics_over_steps_and_shared_layers(device: str) -> None:
    """Several steps, a layer used twice per forward and a cumulative average: the statistics stay those of the
    model without checkpointing, and the buffers stay the same tensors (the recomputation writes into scratch). On a
    GPU BatchNorm runs cuDNN's kernels, which save the statistics for backward differently."""
    torch.manual_seed(0)
    plain = nn.Sequential(SharedNormBlock(), SharedNormBlock()).to(device)
    checkpointed = copy.deepcopy(plain)
    ActivationCheckpointing([SharedNormBlock]).apply(checkpointed)
    buffers_before = [id(b) for b in checkpointed.buffers()]
    for step in range(3):
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(step)).to(device)
        plain(x).square().sum().backward()
        checkpointed(x).square().sum().backward()
    for (name, b), b_ac in zip(plain.named_buffers(), checkpointed.buffers()):
        torch.testing.assert_close(b_ac, b, atol=0, rtol=0, msg=name)
    assert [id(b) for b in checkpointed.buffers()] == buffers_before
    assert int(checkpointed[0].bn.num_batches_tracked) == 6  # two calls per step, three steps: counted once each
    for p, p_ac in zip(plain.parameters(), checkpointed.parameters()):
        torch.testing.assert_close(p_ac.grad, p.grad, atol=1e-6, rtol=0)


def test_image_classifier_features_with_inplace_relu() -> None:
    """`--activation-checkpointing 'features.*'` in examples/train.py: conv, BatchNorm2d, ReLU(inplace=True)."""
    from lightning_mgpu.demos import ImageClassifier

    torch.manual_seed(0)
    plain = ImageClassifier(width=8)
    checkpointed = copy.deepcopy(plain)
    ac = ActivationCheckpointing(["features.*"])
    ac.apply(checkpointed)
    # The in-place ReLUs overwrite their input, so they cannot be recomputed from it: left alone.
    assert ac.skipped_inplace == ["features.2", "features.5"]
    assert ac.checkpointed_names == ["features.0", "features.1", "features.3", "features.4", "features.6"]
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))
    for model in (plain, checkpointed):
        nn.functional.cross_entropy(model(x), y).backward()
    for p, p_ac in zip(plain.parameters(), checkpointed.parameters()):
        torch.testing.assert_close(p_ac.grad, p.grad, atol=1e-6, rtol=0)
    for b, b_ac in zip(plain.buffers(), checkpointed.buffers()):
        torch.testing.assert_close(b_ac, b, atol=0, rtol=0)


def _saved_bytes(net: nn.Module, x: torch.Tensor) -> int:
    """Bytes autograd saves for backward outside checkpointed regions (they keep their own)."""
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = net(x)
    loss.backward()
    return total


def test_checkpointing_saves_activation_memory() -> None:
    torch.manual_seed(0)
    net = Net(depth=8, width=64)
    x = torch.randn(64, 64)
    before = _saved_bytes(net, x)
    ActivationCheckpointing(["net.blocks.*"]).apply(net)
    after = _saved_bytes(net, x)
    assert after < 0.4 * before, (before, after)


def test_state_dict_pickling_and_restore() -> None:
    net = Net()
    keys, classes = list(net.state_dict()), [type(m) for m in net.modules()]
    ac = ActivationCheckpointing(["net.blocks.*"])
    assert ac.apply(net) == ["net.blocks.0", "net.blocks.1", "net.blocks.2", "net.blocks.3"]
    assert ac.apply(net) == []  # idempotent
    assert list(net.state_dict()) == keys
    assert type(net.net.blocks[0]).__name__ == "Block" and isinstance(net.net.blocks[0], Block)
    # Copies come back as plain modules: they cannot reference the generated class by name.
    for clone in (pickle.loads(pickle.dumps(net)), copy.deepcopy(net)):
        assert [type(m) for m in clone.modules()] == classes
        clone.load_state_dict(net.state_dict())
    ac.restore()
    assert [type(m) for m in net.modules()] == classes


def test_data_parallel_replica_runs_its_own_parameters() -> None:
    """nn.DataParallel replicas are shallow copies: the checkpointed forward must use the replica's tensors."""
    block = Block()
    ActivationCheckpointing(["fc2"]).apply(block)
    replica = block.fc2._replicate_for_data_parallel()
    replica._parameters = {
        "weight": torch.zeros_like(block.fc2.weight, requires_grad=True),
        "bias": torch.zeros(16, requires_grad=True),
    }
    x = torch.randn(2, 64, requires_grad=True)
    assert torch.equal(replica(x), torch.zeros(2, 16))
    assert not torch.equal(block.fc2(x), torch.zeros(2, 16))


class CountingBlock(Block):
    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CountingBlock.calls += 1  # a class attribute: the recomputation calls forward, not __call__ and hooks
        return super().forward(x)


class LitNet(pl.LightningModule):
    """Blocks built in configure_model, like a model too large to build eagerly."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 16)

    def configure_model(self) -> None:
        if not hasattr(self, "blocks"):
            self.blocks = nn.Sequential(CountingBlock(), Block(), Block())

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.blocks(self.inp(batch[0])).pow(2).mean()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 16)), batch_size=4)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _RecordingStrategy(SingleDeviceStrategy):
    """Records what is patched when the strategy sets up (and wraps) the model, then rebuilds one module."""

    patched_at_setup: list[bool] = []

    def setup(self, trainer: pl.Trainer) -> None:
        model = trainer.lightning_module
        self.patched_at_setup = [type(b) not in (Block, CountingBlock) for b in model.blocks]
        model.blocks[2] = Block()  # like sync_batchnorm's conversion, which replaces modules while wrapping
        super().setup(trainer)


def test_lightning_patches_configure_model_modules_before_the_strategy_wraps(tmp_path: Path) -> None:
    strategy = _RecordingStrategy(device=torch.device("cpu"))
    ac = ActivationCheckpointing(["blocks.*"])
    model = LitNet()
    trainer = quiet_trainer(strategy=strategy, max_epochs=1, callbacks=[ac])
    patched_in_training: list[bool] = []
    CountingBlock.calls = 0
    model.on_train_batch_start = lambda *a: patched_in_training.append(
        all(type(b) not in (Block, CountingBlock) for b in model.blocks)
    )  # type: ignore[method-assign]
    trainer.fit(model)
    assert strategy.patched_at_setup == [True, True, True]
    assert patched_in_training == [True] * 4  # including the module the strategy rebuilt
    assert CountingBlock.calls == 2 * 4  # forward + recomputation in backward, 4 steps
    assert "configure_model" not in model.__dict__  # the temporary hook is gone
    assert [type(b) for b in model.blocks] == [CountingBlock, Block, Block]  # teardown restored the classes
    # The checkpoint has the plain keys: it loads without the callback.
    trainer.save_checkpoint(tmp_path / "ac.ckpt")
    fresh = LitNet()
    fresh.configure_model()
    fresh.load_state_dict(torch.load(tmp_path / "ac.ckpt", weights_only=False)["state_dict"], strict=True)


class _ValidatingLitNet(LitNet):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.blocks(self.inp(batch[0]))


def test_validate_and_test_do_not_patch() -> None:
    model = _ValidatingLitNet()
    model.configure_model()
    trainer = quiet_trainer(callbacks=[ActivationCheckpointing(["no.such.module"])])
    trainer.validate(
        model, dataloaders=model.train_dataloader()
    )  # no backward, so nothing is patched (and the bad pattern is not even resolved)


class _ConvNet(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Tanh(), nn.Conv2d(4, 4, 3, padding=1)
        )
        self.bn_types: list[type[nn.Module]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.bn_types.append(type(self.features[1]))
        return self.features(batch[0]).pow(2).mean()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(8, 1, 4, 4)), batch_size=4)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _SyncBatchNormStrategy(SingleDeviceStrategy):
    """What ``DDPStrategy.setup`` does with ``sync_batchnorm=True`` (torch's DDP refuses SyncBatchNorm on CPU)."""

    def setup(self, trainer: pl.Trainer) -> None:
        from lightning.pytorch.plugins import TorchSyncBatchNorm

        self.model = TorchSyncBatchNorm().apply(self.model)
        super().setup(trainer)


@pytest.mark.parametrize(
    ("spec", "checkpointed", "warns"),
    [
        # setup checkpoints the BatchNorm2d; sync_batchnorm then replaces it with an nn.SyncBatchNorm, which is
        # not a BatchNorm2d: re-applying in on_fit_start must not fail, but must say what was lost.
        (nn.BatchNorm2d, [], True),
        # A name pattern matches the SyncBatchNorm too: it is checkpointed again.
        ("features.1", ["features.1"], False),
    ],
    ids=["class-spec", "pattern-spec"],
)
def test_sync_batchnorm_conversion_after_setup(
    spec: Any, checkpointed: list[str], warns: bool, recwarn: pytest.WarningsRecorder
) -> None:
    ac = ActivationCheckpointing([spec])
    model = _ConvNet()
    trainer = quiet_trainer(strategy=_SyncBatchNormStrategy(device=torch.device("cpu")), max_epochs=1, callbacks=[ac])
    trainer.fit(model)  # the strategy converts the BatchNorm layers after the callback's setup
    assert model.bn_types and all(issubclass(t, nn.SyncBatchNorm) for t in model.bn_types)
    checkpointed_in_training = [t is not nn.SyncBatchNorm for t in model.bn_types]  # a generated subclass when patched
    assert checkpointed_in_training == [bool(checkpointed)] * len(model.bn_types)
    assert ac.checkpointed_names == []  # teardown restored every class
    lost = [str(w.message) for w in recwarn if "the strategy replaced 1 checkpointed module(s)" in str(w.message)]
    assert len(lost) == (1 if warns else 0), [str(w.message) for w in recwarn]
    if warns:
        assert "features.1" in lost[0] and "nn.SyncBatchNorm" in lost[0]


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_checkpointing_saves_cuda_memory() -> None:
    torch.manual_seed(0)
    net = Net(depth=8, width=256).cuda()
    x = torch.randn(512, 256, device="cuda")

    def peak() -> int:
        net.zero_grad(set_to_none=False)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        net(x).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    net(x).backward()  # allocate gradients
    before = peak()
    ActivationCheckpointing(["net.blocks.*"]).apply(net)
    after = peak()
    assert after < 0.6 * before, (before, after)
