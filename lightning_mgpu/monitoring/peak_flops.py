"""A GPU's dense peak FLOP/s, the denominator of MFU: Lightning's table, corrected where it is silent or sparse.

Lightning 2.6's ``get_available_flops`` finds no entry for an H200 named ``"NVIDIA H200"`` (it looks for
``"sxm1"``/``"nvl1"`` in the name, which CUDA does not report), so MFU went missing there; its H200 entries are
the datasheet's figures *with* 2:4 sparsity, twice what dense training can reach, and its H100 NVL entry is a pair of
boards. Those Hopper parts use NVIDIA's dense figures below; everything else goes to Lightning's table.
"""

from __future__ import annotations

from typing import Any

import torch

# Dense FLOP/s. The H200 SXM is the H100 SXM's GH100 at the same clocks; the NVL parts run at a lower power limit.
# Lightning's "h100 nvl" entry holds the pair's figures of the first NVL datasheet (two boards); one H100 NVL board is
# the H200 NVL's GH100 at the same 835.5 TFLOP/s dense bf16. The H100 SXM and PCIe figures in Lightning's table are
# dense already.
_DENSE: dict[str, dict[Any, float]] = {
    "h100 nvl": {
        torch.float64: 30e12,
        torch.float32: 60e12,
        "tfloat32": 417.5e12,
        torch.bfloat16: 835.5e12,
        torch.float16: 835.5e12,
    },
    "h200 nvl": {
        torch.float64: 30e12,
        torch.float32: 60e12,
        "tfloat32": 417.5e12,
        torch.bfloat16: 835.5e12,
        torch.float16: 835.5e12,
    },
    "h200": {
        torch.float64: 34e12,
        torch.float32: 66.9e12,
        "tfloat32": 494.7e12,
        torch.bfloat16: 989.4e12,
        torch.float16: 989.4e12,
    },
}


def dense_peak_flops(device: torch.device, dtype: Any) -> float | None:
    """The dense peak FLOP/s of ``device`` for matrix products in ``dtype``, or ``None`` where it is not known.

    ``torch.float32`` means TF32 where ``torch.get_float32_matmul_precision()`` allows it (as in Lightning).

    Example::

        >>> dense_peak_flops(torch.device("cpu"), torch.bfloat16) is None
        True
    """
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device).lower()
    for chip, peaks in _DENSE.items():
        if chip.replace(" ", "") in name.replace(" ", ""):
            if dtype is torch.float32 and torch.get_float32_matmul_precision() != "highest":
                dtype = "tfloat32"
            return peaks.get(dtype)
    from lightning.fabric.utilities.throughput import get_available_flops

    found = get_available_flops(device, dtype)
    return float(found) if found else None


def peak_phrase(peak: float | None, dtype: Any = torch.bfloat16) -> str:
    """How ``info`` and the monitor's log name the peak MFU is taken against (``peak`` from :func:`dense_peak_flops`).

    Example::

        >>> peak_phrase(989.4e12)
        'dense bfloat16 peak 989.4 TFLOP/s'
        >>> peak_phrase(None)
        'no known bfloat16 peak (pass the peak yourself for MFU)'
    """
    label = str(dtype).removeprefix("torch.")
    if peak is None:
        return f"no known {label} peak (pass the peak yourself for MFU)"
    return f"dense {label} peak {peak / 1e12:.1f} TFLOP/s"
