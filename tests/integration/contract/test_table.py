"""The feature x strategy table in ``docs/contract.md`` is what the contract tier finds."""

from __future__ import annotations

import pytest

from tests.helpers.contract import BEGIN, END, FEATURES, GROUPS, NEEDS, Runs, render_table
from tests.helpers.launch import REPO_ROOT
from tests.helpers.runif import RunIf


@pytest.mark.timeout(900)
@RunIf(**{needs: True for needs in set(NEEDS.values())})
def test_the_docs_table_is_the_tiers_verdicts(contract_runs: Runs) -> None:
    cells = {s: {f: contract_runs.verdict(s, f) for f in FEATURES} for g in GROUPS for s in g}
    text = (REPO_ROOT / "docs" / "contract.md").read_text()
    documented = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert documented == render_table(cells).strip(), (
        "docs/contract.md's table is not what the contract tier found: regenerate it with "
        "`python -m tests.helpers.contract --write docs/contract.md` (and say why a cell changed)"
    )
