"""Helpers to run scripts in fresh processes with a hard timeout and readable failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(args: list[str], timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` from the repo root; raise with the captured output on failure or timeout."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    cmd = [sys.executable, *args]
    try:
        proc = subprocess.run(cmd, cwd=cwd or REPO_ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"{cmd} timed out after {timeout}s\n--- stdout\n{err.stdout}\n--- stderr\n{err.stderr}") from None
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def run_parity(out: Path, *extra: str, timeout: float = 300, env: dict[str, str] | None = None) -> dict[int, dict[str, torch.Tensor]]:
    """Run ``tests._harness.parity_run`` and return each rank's final parameters."""
    run_python(["-m", "tests._harness.parity_run", "--out", str(out), *extra], timeout=timeout, env=env)
    return {int(p.stem.removeprefix("params_rank")): torch.load(p) for p in sorted(out.glob("params_rank*.pt"))}


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)
