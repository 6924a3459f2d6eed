"""Which GPU of the machine a CUDA index is: torch numbers only the devices ``CUDA_VISIBLE_DEVICES`` lists."""

from __future__ import annotations

import os

__all__ = ["physical_device_ids"]


def physical_device_ids(indices: list[int], visible: str | None = None) -> list[str]:
    """Map CUDA device indices (as torch numbers them) to the GPUs they are on the machine.

    With ``CUDA_VISIBLE_DEVICES=4,5,6,7``, ``cuda:2`` is physical GPU ``6``. Entries may also be
    GPU UUIDs or MIG names, which are returned as written.

    Args:
        indices: logical CUDA indices.
        visible: the value of ``CUDA_VISIBLE_DEVICES``; read from the environment when ``None``.

    Returns:
        One physical id (a string) per index; the index itself when nothing restricts visibility.

    Raises:
        ValueError: an index is outside the devices ``CUDA_VISIBLE_DEVICES`` lists.

    Example::

        >>> physical_device_ids([2, 3], visible="4,5,6,7")
        ['6', '7']
    """
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return [str(i) for i in indices]
    listed = [v.strip() for v in visible.split(",") if v.strip()]
    bad = [i for i in indices if not 0 <= i < len(listed)]
    if bad:
        raise ValueError(
            f"CUDA device index(es) {bad} do not exist: CUDA_VISIBLE_DEVICES={visible!r} makes {len(listed)}"
            f" device(s) visible, numbered 0..{len(listed) - 1}. Device indices count within CUDA_VISIBLE_DEVICES:"
            " to use physical GPUs 2 and 3 either pass devices=[2, 3] without CUDA_VISIBLE_DEVICES, or set"
            " CUDA_VISIBLE_DEVICES=2,3 and pass devices=2."
        )
    return [listed[i] for i in indices]
