"""The benchmark suite: every strategy, callback and data path against its raw loop and its peers, in one command.

    $ python -m benchmarks.run                       # every benchmark that applies here (about 15 min on 2 cores)
    $ python -m benchmarks.run --quick               # CI-sized (under 3 min here)
    $ python -m benchmarks.run --suite strategies --suite memory
    $ python -m benchmarks.run --only horovod,sharded
    $ python -m benchmarks.run --list
    $ python -m benchmarks.run --gpu                 # the GPU variants (benchmarks/gpu_check.sh runs this)
    $ python -m benchmarks.run --only ddp --update benchmarks/results/2026-11-25_cpu3   # rerun one section of a report

From the repository root: FairScale installs a ``benchmarks`` package of its own into site-packages. Each benchmark
runs in its own process (``python -m benchmarks.bench_* --result PATH``) and reports every round of every
arm; the suite takes the median of the per-round ratios, with their min and max. A benchmark or an arm that fails is
reported as failed, with its error, never as a number. The report, the raw figures and the plots are written to
``benchmarks/results/<date>_<hardware>/`` (``--out`` to choose).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import machine as machine_info
from benchmarks.harness import report as reporting
from benchmarks.harness.ranks import REPO_ROOT, repo_env
from benchmarks.harness.registry import BENCHMARKS, SUITES, Benchmark, select

HERE = REPO_ROOT / "benchmarks"

_ROUND = re.compile(r"round (\d+)/(\d+)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", action="append", choices=SUITES, help="run only this suite (repeatable)")
    p.add_argument("--only", type=lambda s: [x for x in s.split(",") if x], help="comma-separated benchmark names")
    p.add_argument("--quick", action="store_true", help="CI-sized runs: fewer rounds and steps")
    p.add_argument("--dry-run", action="store_true", help="one tiny round of each: checks the suite, not the figures")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--gpu", action="store_true", help="run the GPU variant of each benchmark that has one (needs CUDA)")
    p.add_argument(
        "--out", type=Path, default=None, help="results folder (default benchmarks/results/<date>_<hardware>)"
    )
    p.add_argument(
        "--update",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="rerun the chosen benchmarks and replace their sections in the report in FOLDER (same machine,"
        " versions and run size); the report's command line records both runs",
    )
    return p.parse_args(argv)


def _size(dry_run: bool, quick: bool) -> str:
    return "dry" if dry_run else "quick" if quick else "full"


def update_refusal(
    old_machine: dict[str, Any], old_command: str, machine: dict[str, Any], size: str, gpu: bool = False
) -> str | None:
    """Why the report of ``old_machine``/``old_command`` must not take sections from this run, or ``None``.

    A report compares arms measured side by side; sections from another machine, other versions or another run size
    would sit beside figures they cannot be compared with.
    """
    for key in ("cpu", "cores", "gpus", "versions"):
        if old_machine.get(key) != machine.get(key):
            return f"its {key} ({old_machine.get(key)}) differs from this machine's ({machine.get(key)})"
    old_args = old_command.split(";")[0].replace("`", " ").split()  # the first run's command; its flags set the size
    old_size = _size("--dry-run" in old_args, "--quick" in old_args)
    if old_size != size:
        return f"it is a {old_size} run and this one is {size}"
    if ("--gpu" in old_args) != gpu:
        then, now = ("did not run", "does") if gpu else ("ran", "does not")
        return f"it {then} the GPU variants (--gpu) and this run {now}"
    return None


def merge_runs(old: list[reporting.BenchRun], new: list[reporting.BenchRun]) -> list[reporting.BenchRun]:
    """``old`` with every benchmark of ``new`` in place of the one of the same name, in the registry's order."""
    order, what = {b.name: i for i, b in enumerate(BENCHMARKS)}, {b.name: b.what for b in BENCHMARKS}
    for run in old:
        run.what = run.what or what.get(run.name, "")  # reports written before results.json kept it
    by_name = {r.name: r for r in old} | {r.name: r for r in new}
    return sorted(by_name.values(), key=lambda r: order.get(r.name, len(order)))


def skip_reason(bench: Benchmark, size: str, gpu: bool, gpus: int) -> str | None:
    """Why ``bench`` does not run at ``size`` here (``gpus`` visible, ``--gpu`` or not), or ``None``."""
    missing = bench.missing()
    if missing:
        return f"needs {', '.join(missing)}, not installed here"
    if gpu and bench.gpu_args is None:
        return "no GPU variant"
    if gpu and gpus < bench.gpus_needed:
        return f"its GPU variant needs {bench.gpus_needed} GPUs, {gpus} here"
    if not gpu and size not in bench.cpu_sizes:
        return "GPU only: its figures mean nothing on a CPU (run.py --gpu); on the CPU it runs at dry size only"
    return None


#: Where a benchmark that keeps files beyond its figures (run logs, dashboards) writes them: the report's folder.
ARTEFACTS_ENV = "BENCHMARK_ARTEFACTS"


def run_one(
    bench: Benchmark,
    size: str,
    workdir: Path,
    bar_position: int,
    gpu: bool = False,
    gpus: int = 0,
    artefacts: Path | None = None,
) -> reporting.BenchRun:
    """Run one benchmark in its own process, following its ``round i/N`` lines with a progress bar; ``artefacts``:
    the folder its files go to (``$BENCHMARK_ARTEFACTS``)."""
    from tqdm import tqdm

    skipped = skip_reason(bench, size, gpu, gpus)
    if skipped is not None:
        return reporting.BenchRun(bench.name, bench.what, "skipped", error=skipped)
    result_path = workdir / f"{bench.name}.json"
    extra = [*bench.args.get(size, []), *((bench.gpu_args or []) if gpu else [])]
    module = f"benchmarks.{bench.script.removesuffix('.py')}"
    cmd = [sys.executable, "-m", module, *extra, "--result", str(result_path)]
    shown = ["python", "-m", module, *extra]
    env = repo_env(
        PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1", **({ARTEFACTS_ENV: str(artefacts)} if artefacts else {})
    )
    start, tail = time.monotonic(), []
    bar = tqdm(total=None, desc=f"{bench.name:12s}", unit="round", position=bar_position, leave=True, file=sys.stderr)
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        deadline = start + bench.timeout_s[size]
        for line in proc.stdout:
            tail = (tail + [line])[-200:]
            found = _ROUND.search(line)
            if found:
                bar.total = int(found.group(2))
                bar.n = int(found.group(1))
                bar.refresh()
            if time.monotonic() > deadline:
                raise TimeoutError(f"ran past its {bench.timeout_s[size]:.0f} s bound")
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except (TimeoutError, subprocess.TimeoutExpired) as err:
        os.killpg(proc.pid, 9)
        proc.wait()
        bar.close()
        return reporting.BenchRun(
            bench.name, bench.what, "failed", time.monotonic() - start, shown, error=f"{err}\n{''.join(tail[-40:])}"
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    bar.close()
    seconds = time.monotonic() - start
    if proc.returncode != 0 or not result_path.is_file():
        why = f"exit code {proc.returncode}" + ("" if result_path.is_file() else ", no result written")
        return reporting.BenchRun(
            bench.name, bench.what, "failed", seconds, shown, error=f"{why}\n{''.join(tail[-40:])}"
        )
    import json

    return reporting.BenchRun(bench.name, bench.what, "ok", seconds, shown, result=json.loads(result_path.read_text()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        chosen = select(args.suite, args.only)
    except ValueError as err:
        raise SystemExit(f"python -m benchmarks.run: {err}") from None
    if args.list:
        for b in chosen:
            missing = b.missing()
            state = f"  (skipped here: needs {', '.join(missing)})" if missing else ""
            state += "  (GPU only: run.py --gpu)" if "full" not in b.cpu_sizes else ""
            print(f"{b.name:12s} [{', '.join(b.suites)}] {b.what}{state}")
        return 0
    size = _size(args.dry_run, args.quick)
    machine = machine_info.describe()
    if args.gpu and not machine["gpus"]:
        raise SystemExit(
            "python -m benchmarks.run --gpu: no CUDA GPU is visible here; run without --gpu for the CPU suite."
        )
    command = (
        "python -m benchmarks.run " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    ).strip()
    if args.update is not None:
        if args.out is not None:
            raise SystemExit("python -m benchmarks.run: --update writes into the report it updates; leave out --out.")
        try:
            old_runs, old_machine, old_command = reporting.read(args.update)
        except FileNotFoundError:
            raise SystemExit(
                f"python -m benchmarks.run --update: {args.update} holds no results.json; write a report there first"
                " (--out)."
            ) from None
        refusal = update_refusal(old_machine, old_command, machine, size, gpu=args.gpu)
        if refusal is not None:
            raise SystemExit(
                f"python -m benchmarks.run --update: the report in {args.update} cannot take this run's sections:"
                f" {refusal}. Write a new report instead (--out)."
            )
    base: list[reporting.BenchRun] = []
    if args.update is not None:
        out = args.update
        first = old_command if "`" in old_command else f"`{old_command}`"
        command = (
            f"{first}; then, on {machine['date']}, `{command}`, whose sections replace those of the runs before it"
        )
        base, machine = old_runs, old_machine
    else:
        out = args.out or HERE / "results" / (machine_info.slug(machine) + ("" if size == "full" else f"_{size}"))
    runs: list[reporting.BenchRun] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, bench in enumerate(chosen):
            artefacts = out / bench.name
            runs.append(
                run_one(bench, size, Path(tmp), i, gpu=args.gpu, gpus=len(machine["gpus"]), artefacts=artefacts)
            )
            if i + 1 < len(chosen):
                # A run stopped part-way (a killed job, a machine taken back) keeps the benchmarks that finished; the
                # plots wait for the end.
                partial = f"{command} (in progress: {i + 1} of {len(chosen)} benchmarks done)"
                reporting.write(merge_runs(base, runs), machine, partial, out, with_plots=False)
    runs = merge_runs(base, runs)
    report = reporting.write(runs, machine, command, out)
    print("\n" + reporting.terminal_table(runs))
    print(f"\nreport: {report}")
    return 1 if any(r.status == "failed" for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
