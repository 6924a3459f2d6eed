"""Test classes for both Lightning distributions, built from one definition (``tests/helpers/models.py``,
``tests/helpers/trainer.py``): a factory takes the base class, and the ``pytorch_lightning`` build happens on first use,
since importing the second Lightning costs seconds that no test without it should pay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def picklable(cls: type, name: str, module: str) -> type:
    """``cls`` renamed to ``module.name``: spawned workers unpickle it by reference."""
    cls.__name__ = cls.__qualname__ = name
    cls.__module__ = module
    return cls


def pytorch_lightning_twin(module_globals: dict[str, Any], name: str, build: Callable[[Any], type]) -> type:
    """``build(pytorch_lightning)`` as ``module_globals[name]``, built once (a module ``__getattr__`` calls this)."""
    if name not in module_globals:
        import pytorch_lightning

        module_globals[name] = picklable(build(pytorch_lightning), name, module_globals["__name__"])
    return module_globals[name]
