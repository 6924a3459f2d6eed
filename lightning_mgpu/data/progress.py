"""A progress display driven from the driver process as chunks complete.

Workers (processes or Ray tasks) never draw anything: a tqdm bar inside a Ray task prints from a
remote process and breaks. The driver updates the display when a chunk's result arrives, so it
works the same with every backend.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Literal

from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lightning_mgpu.utilities.imports import is_available

ProgressMode = Literal["auto", "tqdm", "log", "none"]


def _format_seconds(s: float) -> str:
    if s != s or s == float("inf"):  # nan or inf: no rate yet
        return "?"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Samples done, their rate and the ETA: a tqdm bar, or a log line every few seconds.

    Args:
        total: samples in the whole cache.
        initial: samples already done (resumed shards); they do not count towards the rate.
        desc: label shown in front.
        mode: ``"auto"`` (tqdm on an interactive terminal when installed, else log lines),
            ``"tqdm"``, ``"log"`` or ``"none"``.
        log_every_s: seconds between log lines in ``"log"`` mode.

    Example::

        with Progress(total=1000, desc="preprocess") as bar:
            bar.update(100)
    """

    def __init__(
        self,
        total: int,
        initial: int = 0,
        desc: str = "preprocess",
        mode: ProgressMode | bool = "auto",
        log_every_s: float = 10.0,
    ) -> None:
        if mode is True:
            mode = "auto"
        elif mode is False:
            mode = "none"
        if mode == "auto":
            mode = "tqdm" if is_available("tqdm") and sys.stderr.isatty() else "log"
        if mode not in ("tqdm", "log", "none"):
            raise ValueError(f"progress={mode!r} is not supported; use True, False, 'auto', 'tqdm', 'log' or 'none'.")
        self.total, self.done, self.desc, self.mode = total, initial, desc, mode
        self._initial = initial
        self._t0 = self._last_log = time.perf_counter()
        self._log_every_s = log_every_s
        self._bar: Any = None
        if mode == "tqdm":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit="sample", dynamic_ncols=True)

    def rate(self) -> float:
        """Samples per second computed in this run."""
        elapsed = time.perf_counter() - self._t0
        return (self.done - self._initial) / elapsed if elapsed > 0 else 0.0

    def eta(self) -> float:
        rate = self.rate()
        return (self.total - self.done) / rate if rate > 0 else float("inf")

    def line(self) -> str:
        pct = 100.0 * self.done / max(self.total, 1)
        eta = _format_seconds(self.eta())
        return f"{self.desc}: {self.done}/{self.total} samples ({pct:.0f}%), {self.rate():.1f} samples/s, ETA {eta}"

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "log":
            now = time.perf_counter()
            if now - self._last_log >= self._log_every_s or self.done >= self.total:
                self._last_log = now
                rank_zero_info(self.line())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
