"""``advisories.json`` stays well-formed, each entry matches on both sides of its version line, and ``import
lightning_mgpu`` warns once about a Lightning that runs what a checkpoint names."""

from __future__ import annotations

import importlib
import json
import re
import warnings
from datetime import date
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import lightning_mgpu
from lightning_mgpu.security import advisories

DATA = Path(advisories.__file__).with_name("advisories.json")
RAW = json.loads(DATA.read_text())
FIELDS = {"id", "aliases", "package", "affected", "fixed", "summary", "url"}
ID = re.compile(r"^(CVE-\d{4}-\d{4,}|GHSA(-[23456789cfghjmpqrvwx]{4}){3}|PYSEC-\d{4}-\d+)$")

#: (id, package) -> (versions that have it, versions that do not): each line, from both sides
LINES = {
    ("CVE-2026-58659", "lightning"): (["2.5.1", "2.6.1", "2.6.5"], ["2.6.6", "2.7.0"]),
    ("CVE-2026-58659", "pytorch-lightning"): (["2.5.1", "2.6.5", "2.6.5.post0"], ["2.6.6", "3.0.0"]),
    ("GHSA-w37p-236h-pfx3", "lightning"): (["2.6.2", "2.6.3"], ["2.6.1", "2.6.4", "2.6.6"]),
    ("GHSA-63cw-57p8-fm3p", "torch"): (["2.6.0", "2.9.1", "2.9.1+cu128"], ["2.10.0", "2.10.0+cpu", "2.13.0"]),
    ("CVE-2026-27482", "ray"): (["2.51.0", "2.53.0"], ["2.54.0", "2.60.0"]),
}


def test_the_file_is_dated_and_every_entry_is_well_formed() -> None:
    assert date.fromisoformat(RAW["checked"]) == date(2026, 11, 28)
    assert RAW["advisories"], "no advisories read"
    for entry in RAW["advisories"]:
        assert set(entry) == FIELDS, entry
        assert ID.match(entry["id"]) and all(ID.match(alias) for alias in entry["aliases"]), entry
        assert entry["package"] in advisories.PACKAGES, entry
        affected, fixed = SpecifierSet(entry["affected"]), Version(entry["fixed"])
        assert len(affected) > 0 and not affected.contains(fixed, prereleases=True), entry
        assert entry["summary"] and "\n" not in entry["summary"] and not entry["summary"].endswith("."), entry
        assert entry["url"].startswith("https://") and any(i in entry["url"] for i in (entry["id"], *entry["aliases"]))
    assert {(a.id, a.package) for a in advisories.known_advisories()} == {
        (e["id"], e["package"]) for e in RAW["advisories"]
    }


def test_every_entry_has_its_version_line_tested() -> None:
    assert set(LINES) == {(a.id, a.package) for a in advisories.known_advisories()}


@pytest.mark.parametrize(("key", "sides"), list(LINES.items()), ids=[f"{i}-{p}" for i, p in LINES])
def test_matching_on_both_sides_of_the_line(key: tuple[str, str], sides: tuple[list[str], list[str]]) -> None:
    advisory = advisories.find(*key)
    has, has_not = sides
    assert [v for v in has if not advisory.affects(v)] == []
    assert [v for v in has_not if advisory.affects(v)] == []
    assert not advisory.affects(str(advisory.fixed)) and not advisory.affects(None) and not advisory.affects("junk")


def test_find_knows_aliases_and_refuses_unknown_ids() -> None:
    assert advisories.find("GHSA-qqmf-gpg7-g8gw", "pytorch-lightning").id == "CVE-2026-58659"
    assert advisories.find("PYSEC-2026-3624", "lightning").id == "CVE-2026-58659"
    with pytest.raises(KeyError, match="no advisory CVE-0000-0000 for torch"):
        advisories.find("CVE-0000-0000", "torch")


def _installed(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str | None]) -> None:
    monkeypatch.setattr(advisories, "installed_version", lambda package: versions.get(package))


def test_applying_lists_what_the_installed_versions_have(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, {"torch": "2.9.1", "lightning": "2.6.3", "ray": "2.60.0", "horovod": "0.28.1"})
    found = {(a.id, a.package, v) for a, v in advisories.applying()}
    assert found == {
        ("GHSA-63cw-57p8-fm3p", "torch", "2.9.1"),
        ("CVE-2026-58659", "lightning", "2.6.3"),
        ("GHSA-w37p-236h-pfx3", "lightning", "2.6.3"),
    }
    _installed(
        monkeypatch, {"torch": "2.13.0+cpu", "lightning": "2.6.6", "pytorch-lightning": "2.6.6", "ray": "2.60.0"}
    )
    assert advisories.applying() == []


def test_info_lists_each_advisory_with_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_mgpu.cli import advisory_lines

    _installed(monkeypatch, {"torch": "2.9.1", "ray": "2.53.0"})
    lines = advisory_lines()
    assert lines[0] == "Security advisories (known as of 2026-11-28):"
    assert any("GHSA-63cw-57p8-fm3p (torch 2.9.1)" in line and "Fixed in torch 2.10.0" in line for line in lines)
    assert any("CVE-2026-27482 (ray 2.53.0)" in line and "Fixed in ray 2.54.0" in line for line in lines)
    assert len(lines) == 3
    _installed(monkeypatch, {"torch": "2.13.0"})
    assert advisory_lines()[1].startswith("  none known for the installed torch, lightning")


def _advisory_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, advisories.SecurityAdvisoryWarning)]


def test_import_warns_once_on_an_affected_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, {"lightning": "2.6.5", "pytorch-lightning": "2.6.5", "torch": "2.13.0"})
    monkeypatch.setattr(advisories, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.reload(lightning_mgpu)  # the package's import, run again
        importlib.reload(lightning_mgpu)  # a second import in the same process says nothing
        advisories.warn_if_lightning_affected()
    (message,) = _advisory_warnings(caught)
    assert message.startswith("CVE-2026-58659: in lightning 2.6.5 and pytorch-lightning 2.6.5, load_from_checkpoint")
    assert "Upgrade to 2.6.6 or newer" in message and "\n" not in message
    assert issubclass(advisories.SecurityAdvisoryWarning, UserWarning)


@pytest.mark.parametrize("versions", [{"lightning": "2.6.6"}, {"pytorch-lightning": "2.6.6", "lightning": "2.6.6"}, {}])
def test_no_warning_on_a_fixed_lightning(versions: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, versions)
    monkeypatch.setattr(advisories, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        advisories.warn_if_lightning_affected()
    assert _advisory_warnings(caught) == []
