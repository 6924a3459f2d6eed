"""A converted script computes what it computed on Lightning 1.x (issue 54): each 1.x script run beside its conversion.

For every script of :data:`CASES` (``tests/helpers/upgrade_equivalence/``, 1.x code written for this repository):

1. the script is copied twice into a temporary folder; one copy is converted with ``lightning-mgpu upgrade --write``;
2. the original runs under its era's reference venv (``.venv-ref-1.9``: pytorch-lightning 1.9.5 and torch 2.0.1;
   ``.venv-ref-1.6``: 1.6.5 and torch 1.13.1, built by ``scripts/check_upgrade_equivalence.sh``), the converted copy
   under the project's ``.venv``: same command line, same seed and synthetic data, CPU processes, a fixed number of
   steps. A case with ``prepare`` first runs the original alone (a checkpoint the later runs resume);
3. each run writes what it recorded to the JSON file ``$EQUIV_OUT`` names: the loss of every step, the final weights,
   and whatever else the script keeps (validation means, gradient norms);
4. the two are compared (:func:`compare`): equal within ``1e-6`` relative, or the case's named difference
   (:data:`DIFFERENCES`) is what the report gives as the cause. Any other difference is one the tool introduced until
   shown otherwise.

The report (``report.md`` and ``report.json``) goes to ``--out``; ``--fixture`` also stores the 1.x figures
(:func:`figures`: losses and a digest of the weights, not the code) for ``tests/integration/upgrade/
test_equivalence.py``, which compares the converted side against them on every CI run.

    bash scripts/check_upgrade_equivalence.sh                          # builds the references, then runs this
    python -m benchmarks.upgrade_equivalence --ref-1.9 .venv-ref-1.9 --ref-1.6 .venv-ref-1.6 --only gan_frequency.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "helpers" / "upgrade_equivalence"
FIXTURE = SCRIPTS / "reference_1x.json"
RTOL = 1e-6
TODO_RE = re.compile(r"TODO\(lightning-mgpu:([\w-]+)\)")


@dataclass(frozen=True)
class Case:
    """One 1.x script and how it runs."""

    #: the Lightning 1.x whose spelling it uses: "1.9" or "1.6"
    era: str
    #: the strategy the 1.x script trains under, as the report names it
    strategy: str
    #: its command line (``{ckpt}``: the checkpoint ``prepare`` wrote)
    argv: tuple[str, ...] = ()
    #: a run of the original alone, before the two compared runs (``{ckpt}`` as above)
    prepare: tuple[str, ...] | None = None
    #: the key of :data:`DIFFERENCES` this case shows; empty: the two must be equal
    difference: str = ""
    #: the figures that difference explains (the others must still be equal); empty: all of them
    explains: tuple[str, ...] = ()
    #: processes it trains on
    world: int = 1
    #: run in CI's extended tier only (two processes, or a shape CI trains elsewhere)
    extended: bool = False
    #: the first step's loss (before any difference in the training can act) is equal on both sides
    first_equal: bool = True
    #: the converted script runs as the tool left it (False: a TODO for a person stops it; CI does not run it)
    runs: bool = True


CASES: dict[str, Case] = {
    # Every case runs in CI's default tier (issue 54: the converted side of each script against its 1.x figures, every
    # run); extended=True is for a case too slow for that.
    "argparse_trainer.py": Case("1.9", "single device", argv=("--gpus", "0", "--max_epochs", "2", "--lr", "0.03")),
    "config_dict.py": Case("1.6", "single device"),
    "ddp_processes.py": Case("1.6", "ddp (2 processes)", world=2),
    "ddp_cpu_spawn.py": Case("1.6", "ddp_cpu (2 processes, 1.x: ddp_spawn)", world=2, difference="ddp-spawn-cpu-sum"),
    "ddp_spawn_cpu.py": Case(
        "1.9",
        "ddp_spawn (2 processes)",
        world=2,
        difference="ddp-spawn-cpu-sum, ddp-spawn-sampler-order",
        first_equal=False,
    ),
    "dp_step_end.py": Case("1.9", "dp (1 CPU device; 1.x: ddp)"),
    "epoch_end_aggregate.py": Case("1.9", "single device"),
    "epoch_end_two_loaders.py": Case("1.6", "single device"),
    "gan_optimizer_idx.py": Case("1.9", "single device"),
    "gan_frequency.py": Case("1.6", "single device"),
    "track_grad_norm.py": Case("1.9", "single device"),
    "accumulate_dict.py": Case("1.9", "single device"),
    "resume_1x_checkpoint.py": Case(
        "1.9", "single device", argv=("--resume", "{ckpt}"), prepare=("--save", "{ckpt}", "--max_epochs", "1")
    ),
    "ddp_sharded.py": Case("1.9", "ddp_sharded (2 processes)", world=2),
    "resume_sharded_1x_checkpoint.py": Case(
        "1.9",
        "ddp_sharded (2 processes)",
        argv=("--resume", "{ckpt}"),
        prepare=("--save", "{ckpt}", "--max_epochs", "1"),
        difference="sharded-resume-scheduler-1x",
        world=2,
    ),
    "resume_dp_1x_checkpoint.py": Case(
        "1.9",
        "dp (1 CPU device; 1.x: ddp)",
        argv=("--resume", "{ckpt}"),
        prepare=("--save", "{ckpt}", "--max_epochs", "1"),
    ),
    "optimizer_step_1x.py": Case("1.9", "single device"),
    "gradient_clip_accumulate.py": Case("1.6", "single device"),
    "auto_lr_find.py": Case("1.9", "single device"),
    "auto_scale_batch_size.py": Case(
        "1.9", "single device", difference="batch-size-dataset-cap", explains=("batch_size_found",)
    ),
    "on_epoch_end.py": Case("1.6", "single device"),
    "reload_dataloaders.py": Case(
        "1.6", "single device", difference="reload-iterates-twice", explains=("losses", "weights_digest")
    ),
    "terminate_on_nan.py": Case("1.6", "single device"),
    "stochastic_weight_avg.py": Case("1.6", "single device"),
    "datamodule_argparse.py": Case(
        "1.9",
        "single device",
        argv=("--max_epochs", "2", "--batch_size", "16", "--accelerator", "cpu", "--devices", "1", "--lr", "0.05"),
    ),
}

#: Differences that are not the tool's: their cause, as the report gives it.
DIFFERENCES = {
    "ddp-spawn-cpu-sum": (
        'Lightning 1.6.5 and 1.9.5 run ddp_spawn on the CPU (and 1.6\'s accelerator="ddp_cpu", which is ddp_spawn) '
        "with the SUM of the ranks' gradients (the spawned ranks' CPU parameters share memory); ddp, torch's DDP and "
        "2.x take the mean. The first step's loss is equal; later steps differ, rightly."
    ),
    "ddp-spawn-sampler-order": (
        "Lightning 1.9.5 put every training loader's own sampler inside a DistributedSamplerWrapper "
        "(trainer/connectors/data_connector.py, _get_distributed_sampler), so a shuffle=True loader's RandomSampler "
        "drew a permutation that the DistributedSampler then permuted again; 1.6.5 and 2.x replace a RandomSampler by "
        "DistributedSampler(dataset). Under every 1.9.5 ddp-family strategy (ddp, ddp_spawn, ddp_sharded) a shuffled "
        "loader hands the ranks other batches than 2.x (the initial weights are equal, the first batch is not; the "
        "tool changes nothing in that file). Without shuffle=True the orders agree (ddp_sharded.py)."
    ),
    "batch-size-dataset-cap": (
        'auto_scale_batch_size="power" with no out-of-memory error: 1.9.5 capped the size at the training set\'s '
        "length (pytorch_lightning/tuner/batch_size_scaling.py, _adjust_batch_size: min(new_size, len(dataset))), "
        "2.x stops at the first power of two at or past it (lightning/pytorch/tuner/batch_size_scaling.py: "
        "batch_size >= the dataset's length ends the search uncapped): 200 samples gave 200 and 256, one batch "
        "either way, so the training is equal. The tool's tuner-flags rule says so."
    ),
    "reload-iterates-twice": (
        "with reload_dataloaders_every_n_epochs=1, 2.x creates the reloaded training loader's iterator twice per "
        "epoch after the first (lightning/pytorch/loops/fit_loop.py, setup_data: iter(self._data_fetcher); "
        "training_epoch_loop.py, on_run_start: iter(data_fetcher) again when current_epoch > 0); the first, never "
        "read, draws its base seed from torch's global generator, so a shuffle=True loader without a generator of its "
        "own shuffles the second epoch on from a state one draw further than 1.6.5's (measured: 3 draws between "
        "train_dataloader() and the first batch, 1.6.5: 2). The loaders' sizes and the first epoch are equal. The "
        "tool's trainer-reload-dataloaders rule says so."
    ),
    "sharded-resume-scheduler-1x": (
        "1.9.5's ddp_sharded lost the LR scheduler on resume: _reinit_optimizers_with_oss "
        "(pytorch_lightning/overrides/fairscale.py) replaced the configured Adam by an OSS sharing its param-group "
        "dicts, which the scheduler (built on the Adam) steps; loading the checkpoint's optimizer state "
        "(torch.optim.Optimizer.load_state_dict) gives the OSS new dicts, so StepLR no longer reached it and the "
        "resumed 1.x run kept lr 0.01 where the schedule says 0.005. The bundle's sharded strategy steps the "
        "schedule. The first epoch after the resume (the 1.x checkpoint's weights and Adam state) is equal."
    ),
}


def digest(weights: list[float]) -> list[float]:
    """What is stored of the final weights: their count, sum, sum of absolute values and sum of squares."""
    return [
        float(len(weights)),
        math.fsum(weights),
        math.fsum(abs(w) for w in weights),
        math.fsum(w * w for w in weights),
    ]


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """What a run recorded, as it is compared and stored: every list as is, the weights as their :func:`digest`."""
    out = {k: v for k, v in record.items() if k != "weights"}
    if "weights" in record:
        out["weights_digest"] = digest(record["weights"])
    return out


def _flat(value: Any) -> list[float]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [float(value)]


def _relative(x: float, y: float) -> float:
    """Their relative difference; two NaNs are equal, a NaN beside a number is as far apart as can be (NaN compares
    false with everything, so a plain difference let a run whose weights went NaN pass as equal)."""
    if math.isnan(x) or math.isnan(y):
        return 0.0 if math.isnan(x) and math.isnan(y) else math.inf
    if x == y:
        return 0.0
    return abs(x - y) / max(abs(x), abs(y), 1e-12)


def compare(reference: dict[str, Any], converted: dict[str, Any], rtol: float = RTOL) -> dict[str, str]:
    """Per figure both runs recorded: ``"equal"``, or what differs (lengths, the first step apart, the largest
    relative difference). A figure only one side recorded is reported as missing on the other."""
    verdicts = {}
    for key in sorted(set(reference) | set(converted)):
        if key not in converted or key not in reference:
            verdicts[key] = "missing in the " + ("converted run" if key not in converted else "1.x run")
            continue
        a, b = _flat(reference[key]), _flat(converted[key])
        if len(a) != len(b):
            verdicts[key] = f"{len(a)} values in 1.x, {len(b)} converted"
            continue
        rel = [_relative(x, y) for x, y in zip(a, b)]
        worst = max(rel, default=0.0)
        if worst <= rtol:
            verdicts[key] = "equal"
        else:
            first = next(i for i, r in enumerate(rel) if r > rtol)
            verdicts[key] = f"differs from value {first} on (largest relative difference {worst:.2e})"
    return verdicts


def verdict(case: Case, compared: dict[str, str]) -> str:
    """``"equal"``; ``"named difference"`` where only the figures the case's difference explains differ; else
    ``"DIFFERS"`` (a difference nothing explains: the tool's until shown otherwise)."""
    unequal = {k for k, v in compared.items() if v != "equal"}
    if not unequal:
        return "equal, though a difference was named" if case.difference else "equal"
    if case.difference and (not case.explains or unequal <= set(case.explains)):
        return "named difference"
    return "DIFFERS"


def _run(python: Path, script: Path, argv: list[str], out: Path, env: dict[str, str], timeout: float) -> str:
    """Run ``script`` with ``python``; an empty string, or the tail of what a failed run printed."""
    env = {**env, "EQUIV_OUT": str(out), "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(
            [str(python), script.name, *argv],
            cwd=script.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    if proc.returncode or not out.exists():
        return f"exit {proc.returncode}: " + (proc.stdout + proc.stderr)[-1500:]
    return ""


def base_env() -> dict[str, str]:
    """The environment without the project's PYTHONPATH and rendezvous variables (each side sets its own)."""
    drop = {"PYTHONPATH", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def convert(script: Path) -> str:
    """``lightning-mgpu upgrade --write script`` with the project's interpreter; its summary (standard error)."""
    env = {**base_env(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_mgpu", "upgrade", "--write", str(script)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stderr


def run_case(name: str, case: Case, refs: dict[str, Path], work: Path, timeout: float) -> dict[str, Any]:
    """Both runs of one case and their comparison, as the report holds them."""
    row: dict[str, Any] = {"script": name, **asdict(case)}
    orig_dir, conv_dir = work / "orig", work / "conv"
    orig_dir.mkdir(parents=True)
    conv_dir.mkdir()
    shutil.copy(SCRIPTS / name, orig_dir / name)
    shutil.copy(SCRIPTS / name, conv_dir / name)
    summary = convert(conv_dir / name)
    row["todos"] = TODO_RE.findall(summary)
    ckpt = str(work / "1x.ckpt")
    ref_python = refs[case.era] / "bin" / "python"
    if case.prepare:
        failed = _run(
            ref_python,
            orig_dir / name,
            [a.format(ckpt=ckpt) for a in case.prepare],
            work / "prep.json",
            base_env(),
            timeout,
        )
        if failed:
            return {**row, "verdict": "1.x preparation failed", "detail": failed}
        row["checkpoint"] = ckpt
    argv = [a.format(ckpt=ckpt) for a in case.argv]
    failed = _run(ref_python, orig_dir / name, argv, work / "1x.json", base_env(), timeout)
    if failed:
        return {**row, "verdict": "1.x run failed", "detail": failed}
    reference = figures(json.loads((work / "1x.json").read_text()))
    row["reference"] = reference
    failed = _run(
        Path(sys.executable), conv_dir / name, argv, work / "2x.json", {**base_env(), "PYTHONPATH": str(ROOT)}, timeout
    )
    if failed:
        failure = "named difference" if case.difference else "converted run failed"
        return {**row, "verdict": failure, "detail": failed}
    converted = figures(json.loads((work / "2x.json").read_text()))
    row["compared"] = compare(reference, converted)
    row["verdict"] = verdict(case, row["compared"])
    return row


def markdown(rows: list[dict[str, Any]], versions: dict[str, str], date: str) -> str:
    """The report: one row per script, then each named difference's cause."""
    lines = [
        f"# Lightning 1.x beside the converted script ({date})",
        "",
        *(f"- {era}: {v}" for era, v in versions.items()),
        "",
        "| script | 1.x | strategy | compared | result |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        compared = ", ".join(f"{k} {v}" if v != "equal" else k for k, v in row.get("compared", {}).items()) or "-"
        result = row["verdict"] + (f" ({row['difference']})" if row["difference"] else "")
        lines.append(f"| `{row['script']}` | {row['era']} | {row['strategy']} | {compared} | {result} |")
    lines += ["", *(f"- **{k}**: {v}" for k, v in DIFFERENCES.items())]
    for row in rows:
        if row.get("detail"):
            lines += ["", f"## {row['script']}: {row['verdict']}", "", "```", row["detail"][-1200:], "```"]
    return "\n".join(lines) + "\n"


def versions_of(python: Path) -> str:
    """The Python, torch and Lightning of an interpreter, for the report ("absent" where it is not built)."""
    if not python.exists():
        return "absent"
    code = (
        "import sys, torch, pytorch_lightning as pl; "
        "print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, pytorch_lightning {pl.__version__}')"
    )
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "not importable (still building?)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref-1.9", dest="ref19", type=Path, default=ROOT / ".venv-ref-1.9")
    parser.add_argument("--ref-1.6", dest="ref16", type=Path, default=ROOT / ".venv-ref-1.6")
    parser.add_argument("--only", nargs="*", help="these scripts of CASES alone")
    parser.add_argument(
        "--out", type=Path, help="report folder (default benchmarks/results/<date>_upgrade_equivalence)"
    )
    parser.add_argument("--fixture", action="store_true", help=f"also store the 1.x figures in {FIXTURE.name}")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders (their path is printed)")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    refs = {"1.9": args.ref19, "1.6": args.ref16}
    date = datetime.date.today().isoformat()
    out = args.out or ROOT / "benchmarks" / "results" / f"{date}_upgrade_equivalence"
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(CASES)
    versions = {era: versions_of(path / "bin" / "python") for era, path in refs.items()}
    versions["converted"] = versions_of(Path(sys.executable)).replace("pytorch_lightning", "lightning")
    work_root = Path(tempfile.mkdtemp(prefix="upgrade_equivalence_"))
    rows = []
    for name in names:
        row = run_case(name, CASES[name], refs, work_root / name.removesuffix(".py"), args.timeout)
        print(f"{name}: {row['verdict']} {row.get('compared', '')}", flush=True)
        rows.append(row)
    report = {"date": date, "versions": versions, "rtol": RTOL, "rows": rows}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(markdown(rows, versions, date))
    print(f"report: {out / 'report.md'}")
    if args.fixture:
        stored = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
        stored["_about"] = {"date": date, "versions": {k: versions[k] for k in refs}}
        for row in rows:
            if "reference" in row:
                stored[row["script"]] = row["reference"]
                if row.get("checkpoint"):
                    shutil.copy(row["checkpoint"], SCRIPTS / (row["script"].removesuffix(".py") + "_1x.pt"))
        FIXTURE.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        print(f"fixture: {FIXTURE}")
    if args.keep:
        print(f"kept: {work_root}")
    else:
        shutil.rmtree(work_root, ignore_errors=True)
    bad = [r for r in rows if r["verdict"] not in ("equal", "named difference")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
