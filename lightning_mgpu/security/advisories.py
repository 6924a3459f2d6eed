"""The known security advisories of the packages the bundle runs on, and which of them the installed versions have.

The advisories are data, ``advisories.json`` beside this module; its ``checked`` date says when each entry was last
read in the advisory databases. Versions are the installed distributions' (``importlib.metadata``): nothing here
imports torch, Lightning or Ray, so ``lightning-mgpu info`` and ``import lightning_mgpu`` can ask at no cost.

Where the answers are used: ``lightning-mgpu info`` lists each advisory that applies; ``import lightning_mgpu`` warns
once about a Lightning whose ``load_from_checkpoint`` runs what a checkpoint names (:func:`warn_if_lightning_affected`);
the checkpoint loads refuse a file on a torch whose ``weights_only`` unpickler is unsafe
(:func:`lightning_mgpu.security.trust.check_untrusted_load`).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

#: the distributions whose advisories the bundle checks
PACKAGES = ("torch", "lightning", "pytorch-lightning", "ray", "horovod")
#: Lightning's load_from_checkpoint runs what a checkpoint names; ``import lightning_mgpu`` warns about it
LIGHTNING_CHECKPOINT_ADVISORY = "CVE-2026-58659"
#: torch's weights_only unpickler can corrupt memory; the checkpoint loads refuse untrusted files under it
TORCH_UNPICKLER_ADVISORY = "GHSA-63cw-57p8-fm3p"
_DATA = Path(__file__).with_name("advisories.json")


@dataclass(frozen=True)
class Advisory:
    """One advisory for one distribution: ``package`` versions in ``affected`` have it, ``fixed`` does not."""

    id: str
    aliases: tuple[str, ...]
    package: str
    affected: SpecifierSet
    fixed: Version
    summary: str
    url: str

    def affects(self, installed: str | None) -> bool:
        """Whether the version ``installed`` (``None``: not installed) has this advisory. Pre-releases and local
        builds (``2.9.1+cu128``) count by their version."""
        if installed is None:
            return False
        try:
            return self.affected.contains(Version(installed), prereleases=True)
        except InvalidVersion:
            return False

    def describe(self, installed: str) -> str:
        """One line: the id, what is installed, the problem, and the version that fixes it."""
        return (
            f"{self.id} ({self.package} {installed}): {self.summary}. Fixed in {self.package} {self.fixed} ({self.url})"
        )


@lru_cache(maxsize=None)
def _read() -> tuple[str, tuple[Advisory, ...]]:
    data = json.loads(_DATA.read_text())
    entries = tuple(
        Advisory(
            id=entry["id"],
            aliases=tuple(entry.get("aliases", ())),
            package=entry["package"],
            affected=SpecifierSet(entry["affected"]),
            fixed=Version(entry["fixed"]),
            summary=entry["summary"],
            url=entry["url"],
        )
        for entry in data["advisories"]
    )
    return data["checked"], entries


def checked() -> str:
    """The date the advisories were last compared with the advisory databases (``YYYY-MM-DD``)."""
    return _read()[0]


def known_advisories() -> tuple[Advisory, ...]:
    """Every advisory of the data file, one per (id, package)."""
    return _read()[1]


def find(advisory_id: str, package: str) -> Advisory:
    """The advisory ``advisory_id`` (or one of its aliases) for ``package``.

    Raises:
        KeyError: no such entry in the data file.
    """
    for advisory in known_advisories():
        if advisory.package == package and advisory_id in (advisory.id, *advisory.aliases):
            return advisory
    raise KeyError(f"no advisory {advisory_id} for {package} in {_DATA.name}")


def installed_version(package: str) -> str | None:
    """The installed version of the distribution ``package``, or ``None``. Every check here reads versions through
    this one function (a test sets it)."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def applying(packages: tuple[str, ...] = PACKAGES) -> list[tuple[Advisory, str]]:
    """``(advisory, installed version)`` for each known advisory that the installed ``packages`` have."""
    found = []
    for advisory in known_advisories():
        if advisory.package in packages:
            installed = installed_version(advisory.package)
            if installed is not None and advisory.affects(installed):
                found.append((advisory, installed))
    return found


class SecurityAdvisoryWarning(UserWarning):
    """An installed package has a known security advisory that the bundle's use of it can reach."""


_warned = False


def warn_if_lightning_affected() -> None:
    """Warn, once per process, when the installed ``lightning`` or ``pytorch-lightning`` runs what a checkpoint
    names in ``load_from_checkpoint`` (:data:`LIGHTNING_CHECKPOINT_ADVISORY`)."""
    global _warned
    if _warned:
        return
    affected = [
        (a, v) for a, v in applying(("lightning", "pytorch-lightning")) if a.id == LIGHTNING_CHECKPOINT_ADVISORY
    ]
    if not affected:
        return
    _warned = True
    installed = " and ".join(f"{a.package} {v}" for a, v in affected)
    fixed = affected[0][0].fixed
    # The id comes first, so that `-W "ignore:CVE-2026-58659"` silences it for whoever has decided to.
    warnings.warn(
        f"{LIGHTNING_CHECKPOINT_ADVISORY}: in {installed}, load_from_checkpoint imports and runs what a checkpoint"
        f" names, even with weights_only=True. Upgrade to {fixed} or newer (pip install -U 'lightning>={fixed}' or"
        f" 'pytorch-lightning>={fixed}'); until then load no checkpoint you did not write.",
        SecurityAdvisoryWarning,
        stacklevel=3,
    )
