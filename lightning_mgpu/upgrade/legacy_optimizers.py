"""Lightning 1.x's optimizer ``"frequency"`` keys, for converted scripts (rule ``manual-optimization``).

1.x ran one optimizer per batch, in turns, where ``configure_optimizers`` returned dicts with ``"frequency"`` keys; 2.x
ignores the key (with a warning). Where the file does not spell the values out (a config's value, a dict updated in a
loop), ``lightning-mgpu upgrade`` keeps the user's method as ``_configure_optimizers_1x`` and writes a
``configure_optimizers`` that passes its result through :func:`legacy_optimizer_frequencies`: the converted
``training_step`` takes its turns from the values read there. Imported by converted code: no libcst here.
"""

from __future__ import annotations

from typing import Any


def legacy_optimizer_frequencies(config: Any) -> tuple[Any, list[Any]]:
    """Split 1.x's optimizer frequencies from what ``configure_optimizers`` returned, as 1.9's
    ``_configure_optimizers`` read them (``core/optimizer.py``).

    Only a list or a tuple of dicts carries frequencies (a single dict's key was never read): every dict gives one,
    or none does (1.x raised ``ValueError`` otherwise, as this does). The dicts come back without the key, in a
    container of the same type; any other configuration comes back as it is.

    Args:
        config: what the 1.x ``configure_optimizers`` returned.

    Returns:
        The configuration for 2.x, and the frequencies in the optimizers' order (``[]``: every optimizer at every
        batch).

    Raises:
        ValueError: some dicts have a ``"frequency"`` and others do not.
    """
    if not isinstance(config, (list, tuple)) or not config or not all(isinstance(d, dict) for d in config):
        return config, []
    frequencies = [d["frequency"] for d in config if d.get("frequency", None) is not None]
    if frequencies and len(frequencies) != len(config):
        raise ValueError("A frequency must be given to each optimizer.")
    if not frequencies:
        return config, []
    stripped = [{k: v for k, v in d.items() if k != "frequency"} for d in config]
    return type(config)(stripped), frequencies
