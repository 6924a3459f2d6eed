"""The options the benchmarks share, each spelled, typed and explained once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

OPTIONS: dict[str, dict[str, Any]] = {
    "accelerator": {"choices": ("cpu", "gpu"), "help": "where the arms run"},
    "rounds": {"type": int, "help": "interleaved rounds (the arms' order rotates every round)"},
    "steps": {"type": int, "help": "timed steps per run"},
    "warmup": {"type": int, "help": "untimed steps per run, before the timed ones"},
    "batch_size": {"type": int, "help": "samples per batch on each rank, one device each"},
    "hidden": {"type": int, "help": "the MLP's hidden width"},
    "width": {"type": int, "help": "the model's width"},
    "threads": {"type": int, "help": "torch CPU threads per process (1 keeps CPU timings steady)"},
}


def parser(doc: str | None, **defaults: Any) -> argparse.ArgumentParser:
    """A benchmark's parser: its docstring as the help, ``--result`` (where ``benchmarks/run.py`` reads every round),
    and each shared option of :data:`OPTIONS` named in ``defaults``, with that default.

    Example::

        p = parser(__doc__, rounds=7, steps=20, warmup=3, batch_size=64, threads=1)
        p.add_argument("--layers", type=int, default=3)  # the benchmark's own
    """
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in defaults.items():
        spec = {**OPTIONS[name], "help": f"{OPTIONS[name]['help']} (default: %(default)s)"}
        p.add_argument("--" + name.replace("_", "-"), default=default, **spec)
    p.add_argument("--result", type=Path, default=None, help="write every round for benchmarks/run.py here")
    return p


def config(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The run's settings for the report: ``names`` of ``args``, or every shared option it has."""
    return {name: getattr(args, name) for name in names or [n for n in OPTIONS if hasattr(args, n)]}
