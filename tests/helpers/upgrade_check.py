"""The corpus tests' independent scan for 1.x spellings left unmarked: it lives in the library now
(:mod:`lightning_mgpu.upgrade.leftovers`, which ``benchmarks/bench_upgrade_real.py`` also measures with)."""

from __future__ import annotations

from lightning_mgpu.upgrade.leftovers import leftovers, unmarked

__all__ = ["leftovers", "unmarked"]
