"""Real model shapes for the GPU benchmarks: a bottleneck ResNet (ResNet-50 at its defaults) and a GPT-2-style
decoder (GPT-2 small at its defaults), randomly initialised from a seed, with nothing but torch.

Both expose ``blocks``, their repeated units (what activation checkpointing wraps), and :func:`step_flops` counts the
FLOPs of one training step on the meta device (no memory, no time), for MFU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class Bottleneck(nn.Module):
    """ResNet's 1x1 -> 3x3 -> 1x1 unit with a projected shortcut where the shape changes (torchvision's v1.5: the
    stride sits on the 3x3)."""

    expansion = 4

    def __init__(self, inp: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(inp, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.shortcut = (
            nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inp != out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.shortcut(x))


class ResNet(nn.Module):
    """A bottleneck ResNet: ``ResNet()`` is ResNet-50 (25.6M parameters, about 4.1 GFLOPs a 224x224 image forward).

    Args:
        layers: bottleneck units per stage ((3, 4, 6, 3): ResNet-50).
        width: the first stage's width; each later stage doubles it.
        classes: output classes.
        seed: the weights' seed.
    """

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), width: int = 64, classes: int = 1000, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks: list[nn.Module] = []
        inp = width
        for stage, count in enumerate(layers):
            for i in range(count):
                blocks.append(Bottleneck(inp, width * 2**stage, stride=2 if stage > 0 and i == 0 else 1))
                inp = width * 2**stage * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(inp, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


class DecoderBlock(nn.Module):
    """Pre-norm causal self-attention and a 4x GELU MLP, each with a residual (GPT-2's block)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention on the GPU
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A GPT-2-style decoder: ``GPT()`` is GPT-2 small (124M parameters with the tied embedding).

    Args:
        layers: decoder blocks.
        heads: attention heads.
        dim: the model width.
        vocab: vocabulary size (50304: GPT-2's 50257 padded to a multiple of 64, as nanoGPT does).
        context: the longest sequence.
        seed: the weights' seed.
    """

    def __init__(
        self, layers: int = 12, heads: int = 12, dim: int = 768, vocab: int = 50304, context: int = 1024, seed: int = 0
    ) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*(DecoderBlock(dim, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tokens(idx) + self.positions(positions))))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross entropy of every position's prediction of the next token."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


@dataclass(frozen=True)
class ModelSpec:
    """One benchmarked model: how to build it and a batch, and its loss.

    Attributes:
        name: the report's label.
        build: builds the model (seeded).
        batch: ``batch(n, generator)`` -> ``(x, y)`` on the CPU.
        loss: ``loss(output, y)``.
        batch_size: samples per step.
        unit: what a sample is ("images", "sequences of 1024 tokens").
        block: the class of the repeated unit in ``blocks`` (what checkpointing and FSDP2 wrap).
    """

    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[Any, Any], torch.Tensor]
    batch_size: int
    unit: str
    block: type[nn.Module]


def resnet_spec(
    batch_size: int, image: int = 224, layers: tuple[int, ...] = (3, 4, 6, 3), width: int = 64
) -> ModelSpec:
    """ResNet-50 (at the defaults) on random ``image`` x ``image`` pictures of 1000 classes."""

    def batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, 3, image, image, generator=g), torch.randint(0, 1000, (n,), generator=g)

    name = "ResNet-50" if (layers, width) == ((3, 4, 6, 3), 64) else f"ResNet{layers}x{width}"
    return ModelSpec(
        name, lambda: ResNet(layers, width), batch, F.cross_entropy, batch_size, f"{image}x{image} images", Bottleneck
    )


def gpt_spec(batch_size: int, context: int = 1024, layers: int = 12, heads: int = 12, dim: int = 768) -> ModelSpec:
    """GPT-2 small (at the defaults) on random token sequences of ``context`` tokens."""
    vocab = 50304

    def batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, vocab, (n, context + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    name = "GPT-2 small" if (layers, heads, dim) == (12, 12, 768) else f"GPT {layers}x{dim}"
    return ModelSpec(
        name,
        lambda: GPT(layers, heads, dim, vocab, context),
        batch,
        next_token_loss,
        batch_size,
        f"sequences of {context} tokens",
        DecoderBlock,
    )


def step_flops(spec: ModelSpec) -> int:
    """The FLOPs of one training step (forward and backward) of ``spec`` at its batch size, counted by torch's
    ``FlopCounterMode`` (through Lightning's ``measure_flops``) on the meta device: no memory, no time."""
    from lightning.fabric.utilities.throughput import measure_flops

    with torch.device("meta"):
        model = spec.build()
        x, y = spec.batch(spec.batch_size, torch.Generator())
    x, y = x.to("meta"), y.to("meta")
    return int(measure_flops(model, lambda: model(x), lambda out: spec.loss(out, y)))
