"""Every public name that README.md and docs/*.md show imports, and so does every name they ever showed.

Names are read from the markdown the way a reader copies them: ``from lightning_mgpu.x import A, B`` (in code blocks
and in text) and dotted references ``lightning_mgpu.a.b.C``. ``docs_public_names.txt`` records every name the docs
have shown; a move without an alias breaks one of them here.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from lightning_mgpu.utilities import deprecation

ROOT = Path(__file__).resolve().parents[2]
RECORD = Path(__file__).with_name("docs_public_names.txt")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: what the README writes for "any of the bundle's classes", not a name
PLACEHOLDERS = {"lightning_mgpu.X", "lightning_mgpu.pl.X"}

_FROM = re.compile(r"from\s+(lightning_mgpu(?:\.\w+)*)\s+import\s+(\([^)]*\)|[\w ,]+(?:\\\n[\w ,]+)*)")
_DOTTED = re.compile(r"(?<![\w./-])lightning_mgpu(?:\.[A-Za-z_]\w*)+")


def shown_names(text: str) -> set[str]:
    """The dotted names a markdown text shows: each name of a ``from ... import`` and each ``lightning_mgpu.a.b``."""
    found = set(_DOTTED.findall(text))
    for module, imported in _FROM.findall(text):
        for part in re.sub(r"#[^\n]*", "", imported).strip("()").replace("\\\n", " ").split(","):
            name = part.strip().split(" as ")[0].strip()
            if name.isidentifier():
                found.add(f"{module}.{name}")
    return found - PLACEHOLDERS


def resolve(dotted: str) -> Any:
    """Import the longest module prefix of ``dotted`` and look the rest up on it, as a reader's code would.

    Raises:
        ImportError: no prefix is a module (``lightning_mgpu`` itself always is).
        AttributeError: the module lacks the name.
    """
    if dotted.startswith("lightning_mgpu.pl"):
        importlib.import_module("pytorch_lightning")  # the twin exists once pytorch_lightning is imported
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as err:
            if (
                err.name is not None
                and not dotted.startswith(err.name)
                and not ".".join(parts[:i]).startswith(err.name)
            ):
                raise  # a missing third-party package, not a missing part of the name
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(dotted)


TODAY = {name for doc in DOCS for name in shown_names(doc.read_text())}
RECORDED = sorted(line for line in RECORD.read_text().splitlines() if line and not line.startswith("#"))


def test_the_docs_are_read() -> None:
    # Guards the parser: a reader that found nothing would pass every test below.
    assert len(TODAY) > 30
    assert {"lightning_mgpu.checkpoint.io.load_state_dict", "lightning_mgpu.strategies.FSDP2Strategy"} <= TODAY
    assert shown_names("x\n```python\nfrom lightning_mgpu.a import (\n    B,  # note\n    C as D,\n)\n```\n") == {
        "lightning_mgpu.a",
        "lightning_mgpu.a.B",
        "lightning_mgpu.a.C",
    }
    assert shown_names("see `lightning_mgpu.a.b.c` and lightning_mgpu/a.py, lightning_mgpu[all]") == {
        "lightning_mgpu.a.b.c"
    }


def test_every_name_the_docs_show_today_is_recorded() -> None:
    assert sorted(TODAY - set(RECORDED)) == [], f"add them to {RECORD.name}"


def _our_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message) for w in caught if issubclass(w.category, DeprecationWarning) and "moved to" in str(w.message)
    ]


@pytest.mark.parametrize("name", RECORDED)
def test_every_name_the_docs_ever_showed_imports(name: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve(name) is not None
    if name in TODAY:
        assert _our_warnings(caught) == [], f"the docs show {name}, an old path: show the new one"


def test_a_move_without_an_alias_fails_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(deprecation.MOVED_MODULES, "lightning_mgpu.utilities.checkpoint")
    monkeypatch.delitem(sys.modules, "lightning_mgpu.utilities.checkpoint", raising=False)
    monkeypatch.delattr(sys.modules["lightning_mgpu.utilities"], "checkpoint", raising=False)
    with pytest.raises(AttributeError):
        resolve("lightning_mgpu.utilities.checkpoint.load_state_dict")
