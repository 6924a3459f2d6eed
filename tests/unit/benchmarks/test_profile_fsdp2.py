"""profile_fsdp2: every moment of a step counted once, for one family, in each arm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import profile_fsdp2


@pytest.mark.extended  # the benchmark's own run: before a benchmark session, with --extended
def test_families_add_up_to_the_step_and_groups_are_the_strategys(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    profile_fsdp2.main(
        ["--device", "cpu", "--model", "small_modules", "--rounds", "1", "--warmup", "1", "--steps", "2"]
        + ["--arms", "raw_fsdp2,sharded_fsdp2_per_module", "--json", str(out)]
    )
    arms = json.loads(out.read_text())["arms"]
    for arm, figures in arms.items():
        families = figures["families_ms"]
        assert set(families) == {"forward", "backward", "fsdp hooks", "optimizer", "other"}, arm
        # Lightning runs forward and backward inside Optimizer.step: counted there too, "other" would go negative.
        assert all(v >= 0 for k, v in families.items() if k != "other"), (arm, families)
        assert families["other"] > -0.05 * figures["step_ms"], (arm, families)
        assert families["fsdp hooks"] > 0 and families["optimizer"] > 0, (arm, families)
