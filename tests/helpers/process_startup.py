"""Run at the start of every Python process of a test session: the garbage collector tuned for short processes that
import torch and Lightning, and torchmetrics kept from importing matplotlib's pyplot.

The integration tier is mostly launches, and a launched process spends most of its life importing torch and Lightning
(about a million objects) and tearing them down again. Two things in that are the collector's, not the imports':

- while importing, the default threshold (700 allocations) runs a collection hundreds of times over a growing heap;
- at exit, after the ``atexit`` handlers, the interpreter collects again, several times, over all of it.

Measured here (2 cores, ``import lightning.pytorch, lightning_mgpu``, median of 5 interleaved): 4.48 s from start to
exit by default, 3.97 s with the threshold below, 3.30 s with the exit step as well. Over the rank-failure and
namespace tests (21 tests, one process): 212 s -> 159 s.

What it changes, and what it keeps:

- the threshold stays 10,000 for the process's life (CPython 3.13 raised its own default for the same reason): cyclic
  garbage is collected less often; nothing that is not cyclic garbage is affected;
- at exit, after every other ``atexit`` handler (this one is registered first, so it runs last), one full collection
  runs as usual, finalizers included, and then what is left is frozen, so the teardown that follows does not walk it
  again. Objects freed by reference counting during the teardown are finalized as always; only cycles that the
  teardown itself leaves are not collected, and the process is about to end.

torchmetrics (which Lightning imports) imports ``matplotlib.pyplot`` at import whenever matplotlib is installed, for
its ``Metric.plot``; the test venv has matplotlib (the dashboard's PNGs, the benchmarks' plots), so every launched
rank paid for it: 0.33 CPU-s of a 4.3 s ``import lightning.pytorch, lightning_mgpu`` here (6 interleaved runs each),
over about 500 launched processes a suite. Here torchmetrics is told matplotlib is absent (its ``Metric.plot`` then
raises, as it does without matplotlib); nothing in the bundle or the tests plots through torchmetrics, and the code
that draws (``dashboard/png.py``, ``benchmarks/harness/report.py``) imports matplotlib itself, as before.

How it is run: ``scripts/setup_env.sh`` puts ``lightning_mgpu_test_startup.pth`` (this folder) into the venv; that
line runs this file in a process that starts with ``LIGHTNING_MGPU_TEST_STARTUP`` naming it, and does nothing in any
other (``scripts/train.sh`` and a user's run never set it). ``tests/conftest.py`` sets it, so every process the tests
start inherits it; it also runs this file in the pytest process itself when the hook did not.
"""

from __future__ import annotations

import atexit
import gc
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

THRESHOLD = (10_000, 10, 10)

gc.set_threshold(*THRESHOLD)
# At exit: collect, then freeze (atexit runs last-registered first). Builtins compare equal, so a second run of this
# file replaces the first's instead of adding to it: a venv's site-packages can be walked twice (lib/ and its lib64/
# link).
for _step in (gc.freeze, gc.collect):
    atexit.unregister(_step)
    atexit.register(_step)


class _TorchmetricsWithoutPlots(importlib.abc.MetaPathFinder):
    """Finds ``torchmetrics.utilities.imports`` as usual and, once it has run, sets its matplotlib flag to False:
    before ``torchmetrics.utilities.plot`` reads it. Gone from ``sys.meta_path`` after that one module."""

    MODULE = "torchmetrics.utilities.imports"

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != self.MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            try:
                run(module)
                module._MATPLOTLIB_AVAILABLE = False
            finally:
                _remove_finder()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _remove_finder() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != _TorchmetricsWithoutPlots.__name__]


# Once per process (a second run of this file replaces the first's finder), and only before torchmetrics is imported.
_remove_finder()
if "torchmetrics.utilities.imports" not in sys.modules:
    sys.meta_path.insert(0, _TorchmetricsWithoutPlots())
