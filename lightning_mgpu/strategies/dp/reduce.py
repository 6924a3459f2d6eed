"""Splitting a batch across DataParallel replicas (:func:`plan_split`, :func:`scatter_batch`) and combining what they
return (:func:`reduce_step_outputs`) and log (:func:`combine_logged_values`). Pure functions without CUDA, so the exact
arithmetic of ``dp`` is tested on any machine.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor

LossReduction = Literal["weighted_mean", "mean", "sum"]
LOSS_REDUCTIONS: tuple[str, ...] = ("weighted_mean", "mean", "sum")

SplitFn = Callable[[Tensor, Sequence[int], Sequence[torch.device]], Sequence[Tensor]]


class BatchSplitError(ValueError):
    """The batch cannot be split along dim 0 across the DataParallel replicas."""


@dataclass(frozen=True)
class SplitPlan:
    """How a batch is cut across replicas.

    Attributes:
        batch_size: samples in the whole batch (the common size of dim 0), or ``None`` when the
            batch holds no tensor to split; then the step runs on the root device only.
        sizes: samples per replica, in replica order; ``len(sizes)`` replicas run.
        num_devices: devices available to DataParallel.
    """

    batch_size: int | None
    sizes: tuple[int, ...]
    num_devices: int

    @property
    def num_replicas(self) -> int:
        return len(self.sizes)

    @property
    def underfilled(self) -> bool:
        """Whether some device got no samples or some replica only one (BatchNorm's weak spot)."""
        return self.num_replicas < self.num_devices or min(self.sizes) < 2


def balanced_sizes(batch_size: int, num_devices: int) -> tuple[int, ...]:
    """Split ``batch_size`` samples over at most ``num_devices`` replicas, sizes differing by <= 1.

    ``torch.chunk`` (what ``nn.DataParallel`` uses) rounds the chunk size up, so 5 samples on 4
    devices become ``[2, 2, 1]`` and one device idles. Balanced sizes use every device:
    ``[2, 1, 1, 1]``. With fewer samples than devices each sample gets its own replica.

    Example::

        >>> balanced_sizes(10, 4)
        (3, 3, 2, 2)
        >>> balanced_sizes(3, 4)
        (1, 1, 1)
    """
    if batch_size < 1:
        raise BatchSplitError(f"dp cannot split an empty batch (0 samples) across {num_devices} devices.")
    replicas = min(batch_size, num_devices)
    base, extra = divmod(batch_size, replicas)
    return tuple(base + 1 if i < extra else base for i in range(replicas))


def _batch_tensors(obj: Any) -> list[Tensor]:
    found: list[Tensor] = []
    apply_to_collection(obj, Tensor, found.append)
    return found


def plan_split(args: Sequence[Any], kwargs: Mapping[str, Any], num_devices: int) -> SplitPlan:
    """Check the step inputs and decide the per-replica sample counts.

    Every tensor found in ``args``/``kwargs`` (at any depth of lists, tuples, dicts and
    dataclasses) is split along dim 0, so all of them must have the same first dimension.
    ``nn.DataParallel`` chunks each tensor on its own, which silently mismatches samples or
    drops replicas when they differ; here that is an error.

    Args:
        args: positional step arguments (the batch, ``batch_idx``, ...).
        kwargs: keyword step arguments.
        num_devices: devices available.

    Returns:
        The plan; ``batch_size=None`` and a single replica when there is no tensor to split.

    Raises:
        BatchSplitError: a tensor is 0-dimensional, tensors disagree on their first dimension,
            or the batch is empty.
    """
    tensors = _batch_tensors((tuple(args), dict(kwargs)))
    if not tensors:
        return SplitPlan(batch_size=None, sizes=(1,), num_devices=num_devices)
    scalars = [tuple(t.shape) for t in tensors if t.dim() == 0]
    if scalars:
        raise BatchSplitError(
            "dp splits every tensor of the batch along dim 0 across the devices, but the batch holds a"
            " 0-dimensional tensor. Return per-sample tensors from the DataLoader (shape [batch, ...]); keep"
            " per-batch constants on the LightningModule (e.g. as a buffer), or use strategy='ddp'."
        )
    lengths = sorted({t.shape[0] for t in tensors})
    if len(lengths) > 1:
        raise BatchSplitError(
            "dp splits every tensor of the batch along dim 0 across the devices, so all of them must have the"
            f" same first dimension (the batch size); found first dimensions {lengths}. Pad or collate the"
            " tensors to a common batch dimension, keep shared tensors on the LightningModule, or use"
            " strategy='ddp', which does not split batches."
        )
    return SplitPlan(batch_size=lengths[0], sizes=balanced_sizes(lengths[0], num_devices), num_devices=num_devices)


def split_on_cpu(tensor: Tensor, sizes: Sequence[int], devices: Sequence[torch.device]) -> Sequence[Tensor]:
    """The split used without CUDA: views of ``tensor``, moved to ``devices`` if they differ."""
    return [t.to(d) for t, d in zip(torch.split(tensor, list(sizes)), devices)]


def scatter_batch(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    plan: SplitPlan,
    devices: Sequence[torch.device],
    split: SplitFn = split_on_cpu,
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Cut ``args``/``kwargs`` into one ``(args, kwargs)`` pair per replica.

    Tensors are split with ``split`` (``Scatter`` on CUDA); every other object is passed to
    every replica unchanged (the same object, as ``nn.DataParallel`` does).

    Args:
        args: positional step arguments.
        kwargs: keyword step arguments.
        plan: from :func:`plan_split`.
        devices: one device per replica (``len(devices) == plan.num_replicas``).
        split: ``split(tensor, sizes, devices) -> chunks``.

    Returns:
        ``plan.num_replicas`` pairs of ``(args, kwargs)``.
    """
    if len(devices) != plan.num_replicas:
        raise ValueError(f"expected {plan.num_replicas} devices for the split, got {len(devices)}")
    data = (tuple(args), dict(kwargs))
    if plan.batch_size is None:
        return [data]
    chunks: dict[int, Sequence[Tensor]] = {}

    def cut(t: Tensor) -> Tensor:
        chunks[id(t)] = split(t, plan.sizes, devices)
        return t

    apply_to_collection(data, Tensor, cut)
    return [apply_to_collection(data, Tensor, lambda t, i=i: chunks[id(t)][i]) for i in range(plan.num_replicas)]


def loss_weights(sizes: Sequence[int], mode: LossReduction) -> list[float]:
    """Per-replica weights of the loss: the batch share, ``1/k`` (Lightning 1.9) or ``1``."""
    if mode == "weighted_mean":
        total = float(sum(sizes))
        return [n / total for n in sizes]
    if mode == "mean":
        return [1.0 / len(sizes)] * len(sizes)
    if mode == "sum":
        return [1.0] * len(sizes)
    raise ValueError(f"loss_reduction={mode!r} is not supported; choose one of {LOSS_REDUCTIONS}.")


def combine_losses(losses: Sequence[Tensor], weights: Sequence[float], device: torch.device) -> Tensor:
    """``sum_i weights[i] * losses[i]`` on ``device``; differentiable, so gradients follow the weights.

    A single loss is returned unchanged (the same tensor), so one replica adds no rounding.
    """
    if len(losses) == 1:
        return losses[0]
    total = losses[0].to(device) * weights[0]
    for loss, weight in zip(losses[1:], weights[1:]):
        total = total + loss.to(device) * weight
    return total


def _is_loss(value: Any) -> bool:
    return isinstance(value, Tensor) and value.numel() == 1 and value.is_floating_point()


def _gather(values: Sequence[Any], device: torch.device) -> Any:
    """Concatenate tensors along dim 0 on ``device``; stack 0-d tensors; recurse into containers."""
    first = values[0]
    if isinstance(first, Tensor):
        if not all(isinstance(v, Tensor) for v in values):
            raise _mismatch(values)
        if first.dim() == 0:
            # One entry per replica, without torch's "asked to gather along dimension 0" warning.
            return torch.stack([v.to(device) for v in values])
        return torch.cat([v.to(device) for v in values], dim=0)
    if first is None:
        return None
    if isinstance(first, Mapping):
        return _rebuild_mapping(first, {k: _gather([v[k] for v in values], device) for k in first})
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # namedtuple
        return type(first)(*(_gather([v[i] for v in values], device) for i in range(len(first))))
    if isinstance(first, (list, tuple)):
        if any(len(v) != len(first) for v in values):
            raise _mismatch(values)
        return type(first)(_gather([v[i] for v in values], device) for i in range(len(first)))
    # Non-tensor values (strings, numbers, objects) pass through from the first replica.
    return first


def _rebuild_mapping(template: Mapping[str, Any], items: dict[str, Any]) -> Mapping[str, Any]:
    try:
        out = type(template)()
        out.update(items)  # type: ignore[attr-defined]
        return out
    except Exception:  # an exotic Mapping without a no-argument constructor
        return items


def _mismatch(values: Sequence[Any]) -> RuntimeError:
    kinds = [type(v).__name__ for v in values]
    return RuntimeError(
        f"dp: the replicas returned differently structured step outputs ({kinds}); every replica must return"
        " the same structure (for example a loss tensor, or a dict with the same keys). Return the same"
        " keys on every batch, or use strategy='ddp'."
    )


def reduce_step_outputs(
    outputs: Sequence[Any],
    sizes: Sequence[int],
    device: torch.device,
    *,
    mode: LossReduction = "weighted_mean",
    has_loss: bool = True,
) -> Any:
    """Combine the per-replica step outputs into what one device would have returned.

    Args:
        outputs: one step output per replica.
        sizes: the samples each replica processed.
        device: the output (root) device.
        mode: how the loss is combined, see :func:`loss_weights`.
        has_loss: ``True`` for training/validation/test steps: a floating scalar output, or the
            ``"loss"`` entry of a dict output, is combined with the loss weights. ``False`` for
            ``predict_step``: everything is gathered.

    Returns:
        The combined output: the loss (weighted), other tensors concatenated along dim 0 on
        ``device`` (0-d tensors stacked into one entry per replica), other values from the
        first replica.

    Raises:
        RuntimeError: some replicas returned ``None`` (skipping the step) and others did not, or
            the replicas returned different structures.
    """
    if all(o is None for o in outputs):
        return None
    if any(o is None for o in outputs):
        skipped = [i for i, o in enumerate(outputs) if o is None]
        raise RuntimeError(
            f"dp: the step returned None on replica(s) {skipped} but not on the others. Returning None skips"
            " the optimization step only when it is decided for the whole batch; decide it before the"
            " batch is split (e.g. in on_train_batch_start, returning -1), or use strategy='ddp'."
        )
    weights = loss_weights(sizes, mode)
    first = outputs[0]
    if has_loss and _is_loss(first):
        return combine_losses(outputs, weights, device)
    if has_loss and isinstance(first, Mapping) and _is_loss(first.get("loss")):
        if not all(isinstance(o, Mapping) and set(o) == set(first) for o in outputs):
            raise _mismatch(outputs)
        items = {k: _gather([o[k] for o in outputs], device) for k in first if k != "loss"}
        items["loss"] = combine_losses([o["loss"] for o in outputs], weights, device)
        return _rebuild_mapping(first, {k: items[k] for k in first})
    return _gather(outputs, device)


#: ``reduce_fx`` names (strings, or functions such as ``torch.mean``) that reduce the stacked values as named.
_REDUCERS: dict[str, Callable[[Tensor], Tensor]] = {
    "sum": lambda stacked: stacked.sum(dim=0),
    "max": lambda stacked: stacked.max(dim=0).values,
    "min": lambda stacked: stacked.min(dim=0).values,
}


def to_log_tensor(value: Any, device: torch.device) -> Tensor:
    """A logged number or one-element tensor as a tensor on ``device`` (detached)."""
    if isinstance(value, Tensor):
        return value.detach().to(device)
    if isinstance(value, (bool, numbers.Number)):
        return torch.tensor(value, device=device)
    raise TypeError(f"cannot reduce a logged value of type {type(value).__name__}")


def combine_logged_values(values: Sequence[Tensor], weights: Sequence[float], reduce_fx: Any) -> Tensor:
    """Reduce the replicas' values of one ``self.log`` key into the value one device would log.

    ``"mean"`` is weighted by each replica's ``batch_size`` (its share of the batch unless the
    step passed ``batch_size=``), so a per-sample mean such as a loss or an accuracy comes out
    as the full-batch value. ``"sum"``, ``"max"`` and ``"min"`` reduce as named; any other
    ``reduce_fx`` is applied to the stacked replica values.

    Args:
        values: one tensor per replica that logged the key (same device).
        weights: one weight per value.
        reduce_fx: the ``reduce_fx`` passed to ``self.log``.

    Returns:
        A tensor with the shape of one value.
    """
    if len(values) == 1:
        return values[0]
    stacked = torch.stack(list(values))
    name = reduce_fx.lower() if isinstance(reduce_fx, str) else getattr(reduce_fx, "__name__", "")
    if name not in ("mean", "avg"):
        return _REDUCERS.get(name, reduce_fx)(stacked)  # anything unnamed is applied as given
    dtype = stacked.dtype if stacked.is_floating_point() else torch.get_default_dtype()
    w = torch.tensor(list(weights), dtype=dtype, device=stacked.device).reshape((-1,) + (1,) * (stacked.dim() - 1))
    return (stacked.to(dtype) * w).sum(dim=0) / w.sum()
