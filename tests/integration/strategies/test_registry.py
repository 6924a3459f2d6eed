"""The bundle's strategy names resolve through Lightning's own registry.

The tests that launch processes; the in-process ones are in ``tests/unit/strategies/test_registry.py``.
"""

from __future__ import annotations

from tests.helpers.launch import run_python


def test_reimport_in_fresh_process_is_harmless() -> None:
    code = (
        "import importlib, lightning_mgpu, lightning_mgpu.strategies.dp.strategy as m;"
        "importlib.reload(m); importlib.reload(lightning_mgpu);"
        "from lightning.pytorch.strategies import StrategyRegistry as R;"
        "assert R['dp']['strategy'].__name__ == 'DataParallelStrategy';"
        "print('ok')"
    )
    assert run_python(["-c", code], timeout=120).stdout.strip().endswith("ok")


def test_import_does_not_import_optional_dependencies() -> None:
    # Lightning itself already imports some of these (pynvml, matplotlib); only what the bundle adds counts.
    code = (
        "import sys, lightning.pytorch;"
        "opt = ('horovod', 'fairscale', 'ray', 'neptune', 'pynvml', 'matplotlib');"
        "base = {m for m in opt if m in sys.modules};"
        "import lightning_mgpu, lightning_mgpu.callbacks, lightning_mgpu.data, lightning_mgpu.loggers;"
        "print('loaded:', [m for m in opt if m in sys.modules and m not in base])"
    )
    out = run_python(["-c", code], timeout=120).stdout
    assert "loaded: []" in out, out
