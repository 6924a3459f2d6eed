"""The multi-replica ``dp`` code path on CPU threads, for testing without GPUs.

``torch.nn.DataParallel`` needs CUDA for more than one device, so on a CPU machine ``dp`` runs as
a single-device strategy and the interesting code (splitting, per-replica steps, loss weighting,
logging, lock-step manual optimization) would go untested. :class:`EmulatedDataParallel` keeps
:class:`~lightning_mgpu.strategies.dp.engine.LightningDataParallel`'s logic and swaps only the
device primitives, imitating torch's CUDA ones:

- replicas are built like ``torch.nn.parallel.replicate`` (``_replicate_for_data_parallel``
  shallow copies); the first replica's parameters share storage with the module's (as on the
  root GPU) and the others get copies; gradients flow back and add up like ``Broadcast``;
- replicas run in one thread each, which set the grad mode and re-enter autocast with its
  default dtype but not inference mode, exactly like ``parallel_apply``.

Use :class:`EmulatedDataParallelStrategy` as ``Trainer(strategy=EmulatedDataParallelStrategy(),
accelerator="cpu", devices=3)`` to check your own LightningModule under ``dp``'s replica split (what each replica
sees, how the losses and logged values combine) without GPUs. It is a testing aid, not faster than one CPU device.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from itertools import chain
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import Tensor, nn
from torch._utils import ExceptionWrapper
from typing_extensions import override

from lightning_mgpu.strategies.dp.engine import LightningDataParallel
from lightning_mgpu.strategies.dp.reduce import LossReduction, split_on_cpu
from lightning_mgpu.strategies.dp.replica import StepModule
from lightning_mgpu.strategies.dp.strategy import DataParallelDevices, DataParallelStrategy


class _CPUBroadcast(torch.autograd.Function):
    """``Broadcast`` on CPU: replica 0 aliases the inputs, the others get copies; grads add up."""

    @staticmethod
    def forward(ctx: Any, num_replicas: int, *inputs: Tensor) -> tuple[Tensor, ...]:
        ctx.num_inputs = len(inputs)
        ctx.num_replicas = num_replicas
        outputs = [list(inputs)] + [[t.clone() for t in inputs] for _ in range(num_replicas - 1)]
        frozen = [out[i] for i, needs in enumerate(ctx.needs_input_grad[1:]) if not needs for out in outputs]
        ctx.mark_non_differentiable(*frozen)
        return tuple(chain.from_iterable(outputs))

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[Any, ...]:
        n = ctx.num_inputs
        summed = [sum(grads[r * n + i] for r in range(ctx.num_replicas)) for i in range(n)]
        return (None, *summed)


def _broadcast(tensors: Sequence[Tensor], num_replicas: int, detach: bool) -> list[list[Tensor]]:
    if not tensors:
        return [[] for _ in range(num_replicas)]
    if detach:
        return [list(tensors)] + [[t.detach().clone() for t in tensors] for _ in range(num_replicas - 1)]
    flat = _CPUBroadcast.apply(num_replicas, *tensors)
    n = len(tensors)
    return [list(flat[r * n : (r + 1) * n]) for r in range(num_replicas)]


def emulated_replicate(network: nn.Module, num_replicas: int, detach: bool = False) -> list[nn.Module]:
    """Replicate ``network`` ``num_replicas`` times the way ``torch.nn.parallel.replicate`` does, on CPU.

    Args:
        network: the module to copy.
        num_replicas: number of replicas.
        detach: build replicas without autograd links (no-grad and inference steps).

    Returns:
        The replica root modules; parameters are plain attributes of the copies.
    """
    params = list(network.parameters())
    param_index = {p: i for i, p in enumerate(params)}
    param_copies = _broadcast(params, num_replicas, detach)
    buffers = list(network.buffers())
    buffers_grad = [b for b in buffers if b.requires_grad and not detach]
    buffers_plain = [b for b in buffers if not (b.requires_grad and not detach)]
    grad_index = {b: i for i, b in enumerate(buffers_grad)}
    plain_index = {b: i for i, b in enumerate(buffers_plain)}
    grad_copies = _broadcast(buffers_grad, num_replicas, detach)
    plain_copies = _broadcast(buffers_plain, num_replicas, detach=True)

    modules = list(network.modules())
    module_index = {m: i for i, m in enumerate(modules)}
    copies = [[m._replicate_for_data_parallel() for m in modules] for _ in range(num_replicas)]
    for i, module in enumerate(modules):
        for r in range(num_replicas):
            replica = copies[r][i]
            for key, child in module._modules.items():
                if child is None:
                    replica._modules[key] = None
                else:
                    setattr(replica, key, copies[r][module_index[child]])
            for key, param in module._parameters.items():
                if param is None:
                    replica._parameters[key] = None
                else:
                    setattr(replica, key, param_copies[r][param_index[param]])
            for key, buf in module._buffers.items():
                if buf is None:
                    replica._buffers[key] = None
                elif buf in grad_index:
                    setattr(replica, key, grad_copies[r][grad_index[buf]])
                else:
                    setattr(replica, key, plain_copies[r][plain_index[buf]])
    return [copies[r][0] for r in range(num_replicas)]


def emulated_parallel_apply(
    modules: Sequence[nn.Module], inputs: Sequence[Any], kwargs_tup: Sequence[dict[str, Any]]
) -> list[Any]:
    """Call each module on its inputs in its own thread, like ``torch.nn.parallel.parallel_apply``."""
    grad_enabled = torch.is_grad_enabled()
    autocast_enabled = torch.is_autocast_enabled("cpu")
    results: dict[int, Any] = {}
    lock = threading.Lock()

    def worker(i: int, module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        torch.set_grad_enabled(grad_enabled)
        try:
            # Like torch: autocast's on/off carries over, its dtype does not, inference mode does not.
            with torch.autocast("cpu", enabled=autocast_enabled):
                output = module(*args, **kwargs)
            with lock:
                results[i] = output
        except Exception:
            with lock:
                results[i] = ExceptionWrapper(where=f"in replica {i} on device cpu (emulated)")

    threads = [
        threading.Thread(target=worker, args=(i, m, a, k))
        for i, (m, a, k) in enumerate(zip(modules, inputs, kwargs_tup))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outputs = []
    for i in range(len(inputs)):
        if isinstance(results[i], ExceptionWrapper):
            results[i].reraise()
        outputs.append(results[i])
    return outputs


class EmulatedDataParallel(LightningDataParallel):
    """:class:`LightningDataParallel` whose "devices" are CPU threads.

    Args:
        module: the LightningModule (on the CPU).
        num_replicas: how many devices to emulate.
        loss_reduction: as in :class:`LightningDataParallel`.
    """

    def __init__(
        self, module: LightningModule, num_replicas: int, loss_reduction: LossReduction = "weighted_mean"
    ) -> None:
        # nn.DataParallel.__init__ turns itself into a no-op without CUDA; set its fields directly.
        nn.Module.__init__(self)
        self.module = StepModule(module)
        self.dim = 0
        self.device_ids = list(range(num_replicas))
        self.output_device = 0
        self.src_device_obj = torch.device("cpu")
        self.loss_reduction = loss_reduction
        self._warned_unsplittable = False

    @property
    def replica_devices(self) -> list[torch.device]:
        return [torch.device("cpu")] * len(self.device_ids)

    def split_tensor(self, tensor: Tensor, sizes: Sequence[int], devices: Sequence[torch.device]) -> Sequence[Tensor]:
        return split_on_cpu(tensor, sizes, devices)

    def replicate(self, module: nn.Module, device_ids: Sequence[Any]) -> list[nn.Module]:
        return emulated_replicate(module, len(device_ids), detach=not torch.is_grad_enabled())

    def parallel_apply(self, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Any) -> list[Any]:
        return emulated_parallel_apply(replicas, inputs, kwargs)


class EmulatedDevices(DataParallelDevices):
    """CPU "devices" for a strategy that drives several with DataParallel: its engine runs them as threads."""

    _data_parallel_device_types = ("cpu",)

    @override
    def _wrap_data_parallel(self, model: nn.Module, loss_reduction: LossReduction) -> EmulatedDataParallel:
        assert isinstance(model, LightningModule), f"DataParallel wraps a LightningModule, got {type(model).__name__}"
        return EmulatedDataParallel(model, len(self.parallel_devices or []), loss_reduction=loss_reduction)


class EmulatedDataParallelStrategy(EmulatedDevices, DataParallelStrategy):
    """``dp`` with CPU "devices": the full multi-replica path on a machine without GPUs (tests only).

    Example::

        Trainer(strategy=EmulatedDataParallelStrategy(), accelerator="cpu", devices=3).fit(model)
    """

    def _topology_note(self) -> str:
        n = len(self.parallel_devices or [])
        return f"strategy='dp' emulated on {n} CPU threads (testing aid; DataParallel's code path without GPUs)."
