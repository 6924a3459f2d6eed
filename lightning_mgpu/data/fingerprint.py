"""Fingerprints of a dataset and a transform, so that a stale cache is never used silently.

**Transform.** The fingerprint covers what decides the transform's output and can be read
without running it:

- functions: module, qualified name, source code (bytecode if the source is not available),
  default arguments, closure variables, and the source of helper functions of the same module
  that the function calls by name (recursively, a few levels deep);
- callable objects: the class's module, qualified name and source (plus those of base classes
  defined in the same module) and the object's attributes (``vars(obj)``: numbers, strings,
  arrays, tensors, nested objects; an ``nn.Module``'s weights are attributes too);
- ``functools.partial`` and bound methods: the underlying function plus the bound arguments or
  instance.

Not covered: code in other modules or packages (a library upgrade), files the transform reads,
global variables. Pass ``transform_version="2"`` (mixed into the automatic fingerprint) when such
a change alters the output, or ``transform_fingerprint="my-key"`` to replace the automatic one.

**Dataset.** Its type, length and a content hash of up to 16 evenly spaced raw samples
(``dataset[i]``, before the transform), including the first and the last. A change to a
sample that is not probed goes unnoticed; pass ``dataset_fingerprint="v3"`` (a data version, a
file checksum, ...) to replace the automatic fingerprint. Reading ``dataset[0]`` twice also
detects a non-deterministic ``__getitem__`` (random augmentation belongs in ``augment=``).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from lightning_mgpu.data._worker import to_array

#: Bump when the cache layout or the fingerprint recipe changes; old caches are then rebuilt.
FORMAT_VERSION = 1
_MAX_DEPTH = 6
_NUM_PROBES = 16


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def qualified_name(obj: Any) -> str:
    """``module.QualName`` of a function or class, or of an object's class."""
    if isinstance(obj, functools.partial):
        return f"functools.partial({qualified_name(obj.func)})"
    if inspect.ismethod(obj):
        obj = obj.__func__
    target = obj if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)) else type(obj)
    return f"{getattr(target, '__module__', None) or '?'}.{getattr(target, '__qualname__', type(target).__name__)}"


class _Hasher:
    """Feeds a canonical, process-independent encoding of Python values into a sha256."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self._active: set[int] = set()

    def tag(self, *parts: Any) -> None:
        for p in parts:
            self.h.update(str(p).encode())
            self.h.update(b"\0")

    def value(self, v: Any, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            self.tag("<depth>")
            return
        if v is None or isinstance(v, (bool, int, float, complex, str)):
            self.tag(type(v).__name__, repr(v))
        elif isinstance(v, (bytes, bytearray, memoryview)):
            self.tag("bytes", len(v))
            self.h.update(bytes(v))
        elif isinstance(v, (np.ndarray, np.generic)) or (hasattr(v, "detach") and hasattr(v, "numpy")):
            self._array(v)
        elif hasattr(v, "tobytes") and hasattr(v, "mode") and hasattr(v, "size"):  # a PIL image
            self.tag("image", v.mode, v.size)
            self.h.update(v.tobytes())
        elif id(v) in self._active:  # a reference cycle
            self.tag("<cycle>", type(v).__qualname__)
        else:
            self._active.add(id(v))
            try:
                self._container_or_object(v, depth)
            finally:
                self._active.discard(id(v))

    def _array(self, v: Any) -> None:
        try:
            arr = to_array(v, "value")
        except Exception:  # noqa: BLE001 - e.g. bfloat16 tensors: hash their float32 copy, exact for bf16
            arr = v.detach().float().cpu().numpy()
        arr = np.ascontiguousarray(arr)
        self.tag("array", arr.dtype.str, arr.shape)
        self.h.update(arr.view(np.uint8).reshape(-1) if arr.size else b"")  # type: ignore[arg-type]  # ndarray: a buffer

    def _container_or_object(self, v: Any, depth: int) -> None:
        if isinstance(v, Mapping):
            self.tag("map", type(v).__qualname__, len(v))
            for k in sorted(v, key=repr):
                self.value(k, depth + 1)
                self.value(v[k], depth + 1)
        elif isinstance(v, (list, tuple)):
            self.tag("seq", type(v).__qualname__, len(v))
            for x in v:
                self.value(x, depth + 1)
        elif isinstance(v, (set, frozenset)):
            self.tag("set", len(v))
            for x in sorted(v, key=repr):
                self.value(x, depth + 1)
        elif isinstance(v, type) or callable(v):
            self.callable(v, depth + 1)
        elif hasattr(v, "__dict__"):
            self.tag("object", qualified_name(v))
            self.value(vars(v), depth + 1)
        else:
            text = repr(v)
            # A default repr embeds the memory address, which changes on every run.
            self.tag("repr", qualified_name(v), "" if " at 0x" in text else text)

    def callable(self, fn: Any, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            self.tag("<depth>")
        elif isinstance(fn, functools.partial):
            self.tag("partial")
            self.callable(fn.func, depth + 1)
            self.value(fn.args, depth + 1)
            self.value(fn.keywords, depth + 1)
        elif inspect.ismethod(fn):
            self.tag("method")
            self.callable(fn.__func__, depth + 1)
            self.value(fn.__self__, depth + 1)
        elif inspect.isfunction(fn):
            self._function(fn, depth)
        elif isinstance(fn, type):
            self._class(fn)
        elif isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)) or not hasattr(fn, "__dict__"):
            self.tag("builtin", qualified_name(fn))
        else:  # a callable object: its class's code and its state
            self._class(type(fn))
            if id(fn) not in self._active:
                self._active.add(id(fn))
                try:
                    self.value(vars(fn), depth + 1)
                finally:
                    self._active.discard(id(fn))

    def _function(self, fn: types.FunctionType, depth: int) -> None:
        self.tag("function", qualified_name(fn))
        self._source_or_code(fn, fn.__code__)
        self.value(fn.__defaults__, depth + 1)
        self.value(fn.__kwdefaults__, depth + 1)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell
                self.tag("<empty cell>")
        # Helpers of the same module called by name: a change there changes the output too.
        if id(fn) in self._active:
            return
        self._active.add(id(fn))
        try:
            for name in _global_names(fn.__code__):
                helper = fn.__globals__.get(name)
                if inspect.isfunction(helper) and helper.__module__ == fn.__module__ and helper is not fn:
                    self.tag("helper", name)
                    self.callable(helper, depth + 1)
        finally:
            self._active.discard(id(fn))

    def _class(self, cls: type) -> None:
        self.tag("class", qualified_name(cls))
        for base in cls.__mro__:
            if base.__module__ == cls.__module__:
                self._source_or_code(base, None)

    def _source_or_code(self, obj: Any, code: types.CodeType | None) -> None:
        try:
            self.tag("source", inspect.getsource(obj))
            return
        except (OSError, TypeError):
            pass
        # No source file (an interactive session, a frozen app): fall back to the bytecode.
        if code is None and isinstance(obj, type):
            for name, attr in sorted(vars(obj).items()):
                if inspect.isfunction(attr):
                    self.tag("method", name)
                    self._code(attr.__code__)
            return
        if code is not None:
            self._code(code)

    def _code(self, code: types.CodeType) -> None:
        self.tag("code", code.co_name, code.co_names, code.co_varnames)
        self.h.update(code.co_code)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                self._code(c)
            else:
                self.tag(repr(c))

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def _global_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.extend(_global_names(c))
    return sorted(set(names))


def fingerprint_transform(
    transform: Callable[[Any], Any] | None, version: str | int | None = None, override: str | None = None
) -> str:
    """sha256 of a transform's code and state; see the module docstring for what it covers.

    Args:
        transform: the callable, or ``None`` for the identity.
        version: mixed into the automatic fingerprint; bump it when something the fingerprint
            cannot see (another module, a data file, a library) changes the output.
        override: replaces the automatic fingerprint entirely (you vouch for it).

    Example::

        fingerprint_transform(my_transform, version="2")
    """
    if override is not None:
        return _digest("user-transform-fingerprint", str(override))
    if transform is None:
        return _digest("identity", str(version))
    hasher = _Hasher()
    hasher.tag("transform", version)
    hasher.callable(transform)
    return hasher.hexdigest()


def _probe_indices(n: int, probes: int = _NUM_PROBES) -> list[int]:
    if n <= probes:
        return list(range(n))
    return sorted({round(k * (n - 1) / (probes - 1)) for k in range(probes)})


def hash_sample(sample: Any) -> str:
    """sha256 of one sample's content (arrays, tensors, numbers, strings, containers)."""
    hasher = _Hasher()
    hasher.value(sample)
    return hasher.hexdigest()


def fingerprint_dataset(dataset: Any, override: str | None = None) -> str:
    """sha256 of a dataset's type, length and a probe of its samples.

    Args:
        dataset: a map-style dataset (``len`` and ``dataset[i]``).
        override: a key of your own (data version, checksum of the source files) used instead.

    Raises:
        ValueError: ``dataset[0]`` returns different content on two reads.
    """
    n = len(dataset)
    if override is not None:
        return _digest("user-dataset-fingerprint", str(override), str(n))
    hasher = _Hasher()
    hasher.tag("dataset", qualified_name(dataset), n)
    indices = _probe_indices(n)
    for i in indices:
        hasher.tag("sample", i)
        hasher.value(dataset[i])
    if indices and hash_sample(dataset[indices[0]]) != hash_sample(dataset[indices[0]]):
        raise ValueError(
            f"{qualified_name(dataset)}[{indices[0]}] returns different content on two reads: the dataset is not"
            " deterministic, so its cache could never be validated. Move random augmentation out of __getitem__ into"
            " `augment=` (it runs online, after the cache), or pass `dataset_fingerprint=` with a key of your own."
        )
    return hasher.hexdigest()


def combine_fingerprints(dataset_fp: str, transform_fp: str) -> str:
    """The cache's fingerprint: dataset, transform and cache format together."""
    return _digest(f"lightning_mgpu.data/{FORMAT_VERSION}", dataset_fp, transform_fp)
