"""Step timing and host-device sync detection for :class:`~lightning_mgpu.callbacks.GPUUtilizationMonitor`.

Both run on the training thread, so they only read clocks and add numbers: no device work, no
``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import FrameType
from typing import Any


@dataclass
class TimingAcc:
    """Sums over a span of training batches (a logging window, a diagnosis period, the whole fit)."""

    wait_s: float = 0.0
    step_s: float = 0.0
    batches: int = 0
    samples: float = 0.0
    synced_s: float = 0.0
    synced_n: int = 0
    unsynced_s: float = 0.0
    unsynced_n: int = 0
    host_syncs: int = 0

    def merge(self, other: TimingAcc) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def total_s(self) -> float:
        return self.wait_s + self.step_s


class StepTimer:
    """Splits training time into waiting for data and computing, batch by batch.

    The wait of a batch runs from the end of the previous batch to the start of this one
    (fetch, host-to-device copy, and whatever runs between batches). Spans that are not
    training are left out: validation restarts the clock at its end (:meth:`restart`), and a
    checkpoint save (:meth:`mark_gap`) drops the whole interval it falls in.

    Example::

        timer = StepTimer()
        timer.restart(t0)
        timer.batch_start(t1)            # wait = t1 - t0
        timer.batch_end(t2, samples=32, synced=True)   # step = t2 - t1
        window = timer.take()            # TimingAcc of the batches so far
    """

    def __init__(self) -> None:
        self.acc = TimingAcc()
        self._prev_end: float | None = None
        self._start: float | None = None
        self._wait: float | None = None
        self._gap = False

    def restart(self, now: float) -> None:
        """Start the wait clock now (epoch start, validation end): nothing before counts."""
        self._prev_end, self._gap = now, False

    def pause(self) -> None:
        """Stop counting until :meth:`restart` (validation start)."""
        self._prev_end = None

    def mark_gap(self) -> None:
        """Drop the interval in progress (a checkpoint is being written)."""
        self._gap = True

    def batch_start(self, wait_end: float, step_start: float | None = None) -> None:
        """The batch arrived at ``wait_end``; its compute starts at ``step_start`` (default: then)."""
        prev_end = None if self._gap else self._prev_end  # a gap (validation, a save) is not a wait for data
        self._wait = max(0.0, wait_end - prev_end) if prev_end is not None else None
        self._start = wait_end if step_start is None else step_start
        self._gap = False

    def batch_end(self, now: float, samples: float, synced: bool, host_syncs: int = 0) -> None:
        """The batch finished: add it to the accumulator unless its interval was dropped."""
        start, wait = self._start, self._wait
        self._start, self._wait = None, None
        if start is not None and wait is not None and not self._gap:
            step = now - start if now > start else 0.0
            a = self.acc
            a.wait_s += wait
            a.step_s += step
            a.batches += 1
            a.samples += samples
            a.host_syncs += host_syncs
            if synced:
                a.synced_s += step
                a.synced_n += 1
            else:
                a.unsynced_s += step
                a.unsynced_n += 1
        if start is not None:
            self._prev_end, self._gap = now, False

    def set_end(self, now: float) -> None:
        """Move the end of the last batch to ``now`` (leave the monitor's own work out of the next wait)."""
        if self._prev_end is not None:
            self._prev_end = now

    def take(self) -> TimingAcc:
        """The accumulated batches; start a new accumulator."""
        acc, self.acc = self.acc, TimingAcc()
        return acc


SYNC_WARNING = "called a synchronizing CUDA operation"
_SYNC_RE = re.compile(re.escape(SYNC_WARNING))


def _package_dir(module: Any) -> str:
    # The trailing separator keeps ``.../torch/`` from also matching ``.../torchmetrics/``.
    return os.path.join(os.path.dirname(os.path.abspath(module.__file__)), "")


def _skipped_prefixes() -> tuple[str, ...]:
    """Frames that are never the call site: torch (where the sync happens) and the detector's own machinery."""
    import torch

    here = os.path.abspath(__file__)
    monitor = os.path.join(os.path.dirname(here), "callback.py")
    return (_package_dir(torch), os.path.abspath(warnings.__file__), here, monitor)


def _lightning_prefixes() -> tuple[tuple[str, str], ...]:
    """``(package dir, the dir its relative paths start from)`` of each imported Lightning package."""
    found = []
    for name in ("lightning", "lightning_fabric", "pytorch_lightning", "lightning_utilities"):
        # Only what is imported already: a package that is not loaded has no frames, and importing
        # pytorch_lightning would change the warning filters of the run.
        module = sys.modules.get(name)
        if module is None or getattr(module, "__file__", None) is None:
            continue
        package = _package_dir(module)
        found.append((package, os.path.dirname(os.path.dirname(package))))
    return tuple(found)


def _describe(frame: FrameType) -> str:
    code = frame.f_code
    line = linecache.getline(code.co_filename, frame.f_lineno).strip()
    where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
    return f"{where}: {line}" if line else where


class SyncDetector:
    """Counts implicit host-device synchronisations and names their call sites.

    While a step is active (:meth:`begin_step` .. :meth:`end_step`), torch's CUDA sync debug mode
    is ``"warn"``: every synchronising call (``.item()``, ``.cpu()``, ``.numpy()``, ``.tolist()``,
    a blocking copy, ...) raises a warning, which the detector swallows and attributes to the first
    stack frame outside torch: the user's line. When that frame belongs to Lightning, the sync is
    Lightning's own (its logging, a hook's bookkeeping), and the site reads
    ``lightning internals (lightning/pytorch/...py:LINE)``: walking on to the user's frame would
    blame ``trainer.fit(...)`` for it. ``torch.cuda.empty_cache()`` is counted too (it is not
    covered by the debug mode).

    Args:
        set_mode: sets the CUDA sync debug mode (0 off, 1 warn); ``torch.cuda.set_sync_debug_mode``
            by default. Tests inject a fake.
        patch_empty_cache: also count ``torch.cuda.empty_cache()`` calls.

    Example::

        detector = SyncDetector()
        detector.install()
        detector.begin_step(); loss.item(); n = detector.end_step()   # n == 1
        detector.top_sites(3)   # [("train.py:42 in training_step: loss.item()", 1)]
        detector.uninstall()
    """

    def __init__(self, set_mode: Callable[[int], None] | None = None, patch_empty_cache: bool = True) -> None:
        self._set_mode = set_mode
        self._patch_empty_cache = patch_empty_cache
        self.sites: Counter[str] = Counter()
        self.total = 0
        self._step_count = 0
        self._active = False
        self._installed = False
        self._prev_showwarning: Any = None
        self._filter: Any = None
        self._prev_empty_cache: Any = None
        self._skip: tuple[str, ...] = ()
        self._lightning: tuple[tuple[str, str], ...] = ()

    def _mode(self, value: int) -> None:
        if self._set_mode is not None:
            self._set_mode(value)
        else:
            import torch

            torch.cuda.set_sync_debug_mode(value)

    def install(self) -> None:
        """Route the sync warnings to the detector (idempotent)."""
        if self._installed:
            return
        import torch

        self._skip = _skipped_prefixes()
        self._lightning = _lightning_prefixes()
        # "always": count every occurrence, not just the first per call site.
        warnings.filterwarnings("always", message=_SYNC_RE.pattern, category=UserWarning)
        self._filter = warnings.filters[0]
        self._prev_showwarning = warnings.showwarning
        warnings.showwarning = self._showwarning
        if self._patch_empty_cache:
            self._prev_empty_cache = torch.cuda.empty_cache
            prev = self._prev_empty_cache

            def empty_cache() -> None:
                self._record(sys._getframe(1), "torch.cuda.empty_cache()")
                prev()

            torch.cuda.empty_cache = empty_cache
        self._installed = True

    def uninstall(self) -> None:
        """Restore the warning hook, ``empty_cache`` and the debug mode."""
        if not self._installed:
            return
        import torch

        if self._active:
            self.end_step()
        if warnings.showwarning == self._showwarning:
            warnings.showwarning = self._prev_showwarning
        if self._filter in warnings.filters:
            warnings.filters.remove(self._filter)  # type: ignore[attr-defined]  # a list at run time
            getattr(warnings, "_filters_mutated", lambda: None)()  # invalidate the per-module "once" caches
        if self._prev_empty_cache is not None:
            torch.cuda.empty_cache = self._prev_empty_cache
            self._prev_empty_cache = None
        self._installed = False

    def begin_step(self) -> None:
        self._step_count = 0
        self._active = True
        self._mode(1)

    def end_step(self) -> int:
        """Leave the step; returns the syncs counted in it."""
        self._mode(0)
        self._active = False
        return self._step_count

    def _record(self, frame: FrameType | None, what: str | None = None) -> None:
        if not self._active:
            return
        self._step_count += 1
        self.total += 1
        site = self._site(frame)
        self.sites[f"{site} [{what}]" if what else site] += 1

    def _site(self, frame: FrameType | None) -> str:
        first = frame
        while frame is not None:
            filename = frame.f_code.co_filename
            if not filename.startswith(self._skip) and not filename.startswith("<"):
                for package, root in self._lightning:
                    if filename.startswith(package):
                        return f"lightning internals ({os.path.relpath(filename, root)}:{frame.f_lineno})"
                return _describe(frame)
            frame = frame.f_back
        return _describe(first) if first is not None else "<unknown>"

    def _showwarning(
        self, message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if self._active and SYNC_WARNING in str(message):
            self._record(sys._getframe(1))
            return
        self._prev_showwarning(message, category, filename, lineno, file, line)

    def top_sites(self, n: int = 5) -> list[tuple[str, int]]:
        return self.sites.most_common(n)
