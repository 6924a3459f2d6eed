"""Exit-status soak: run the FairScale fit that used to abort at exit N times, J at a time, and count how each ended.

The script is the converted 1.x corpus script ``tests/helpers/upgrade_corpus/sharded_plugin_cpu.py`` (Lightning 1.5's
``DDPShardedPlugin`` on 2 CPU processes; ``lightning-mgpu upgrade --write`` makes it a ``ShardedStrategy`` fit under
Lightning's ``ddp`` launcher). Before ``release_destroyed_groups`` (5c54a1f) about 1 run in 10-20 finished its fit,
wrote ``done.txt`` and then aborted during interpreter finalization ("terminate called without an active exception",
SIGABRT) while gloo's threads were torn down. It is run as a user runs it: ``python script.py``, a fresh process
session per run, no rendezvous variable inherited.

Each run ends as one of:

- ``ok``: exit 0 and ``done.txt`` written (the fit finished);
- ``abort``: the finalization abort: exit -6 (SIGABRT), 134 (a shell's 128+6), or "terminate called" in its output
  (rank 1 is rank 0's child and can abort after rank 0 has exited 0: only its message shows it);
- ``hang``: still running at its own timeout (then stopped, process group and all);
- ``failed``: any other non-zero exit, or exit 0 without ``done.txt``.

Bounded: ``--runs`` in all, ``--jobs`` at a time, each stopped after ``--run-timeout`` s, and no run starts after
``--deadline`` s (those running then may finish, within their timeout; those never started count as not run), so the
whole soak takes at most ``--deadline`` + ``--run-timeout`` s.

Writes ``<out>/summary.json`` (counts, exit codes, per-run seconds, versions, date) and ``<out>/runs/<i>/output.txt``
for every run that did not end ``ok``; prints a one-line summary per finished run and the totals. Exit status: 0 when
every run that ran was ``ok`` and all ``--runs`` ran, else 1.

Usage (from the repository root, in the project's venv)::

    python scripts/soak_exit_status.py --runs 200 --jobs 1 --deadline 9000 --out outputs/soak_exit_status
    python scripts/soak_exit_status.py --runs 1 --jobs 1 --out /tmp/soak_one     # time one run
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS_SCRIPT = REPO_ROOT / "tests" / "helpers" / "upgrade_corpus" / "sharded_plugin_cpu.py"
# Rendezvous variables a run must choose for itself (Lightning's ddp launcher picks a free port when none is set).
RENDEZVOUS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
)
ABORT_CODES = (-signal.SIGABRT, 128 + signal.SIGABRT)
ABORT_TEXT = "terminate called"


@dataclass
class Run:
    index: int
    outcome: str  # ok | abort | hang | failed
    returncode: int | None
    seconds: float


def convert(work: Path) -> Path:
    """The corpus script, converted by ``lightning-mgpu upgrade --write`` into ``work`` (once for all runs)."""
    from lightning_mgpu.cli import main as cli_main

    script = work / CORPUS_SCRIPT.name
    shutil.copy(CORPUS_SCRIPT, script)
    # The conversion is part of the scenario (the script users ran is the converted one); a failed conversion stops
    # the soak before any run, since every run would then test something else.
    if cli_main(["upgrade", "--write", str(script)]) != 0:
        raise SystemExit(f"lightning-mgpu upgrade --write {script} failed")
    return script


def run_env(out: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RENDEZVOUS}
    env.update(CORPUS_OUT=str(out), PYTHONUNBUFFERED="1")
    return env


def classify(returncode: int | None, output: str, done: bool, timed_out: bool) -> str:
    # Order matters: a run that was stopped is a hang whatever it printed; the abort's text counts even at exit 0
    # (rank 1's abort after rank 0 exited 0), so it is checked before success.
    if timed_out:
        return "hang"
    if returncode in ABORT_CODES or ABORT_TEXT in output:
        return "abort"
    if returncode == 0 and done:
        return "ok"
    return "failed"


def stop(proc: subprocess.Popen) -> None:
    """SIGKILL the run's whole session (rank 0 and the rank it launched)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _copy(stream, path: Path) -> None:
    """Copy a run's output to its file until EOF, which comes once every rank (each holds the pipe) has exited."""
    with stream, path.open("wb") as sink:
        shutil.copyfileobj(stream, sink)


def soak(script: Path, out: Path, runs: int, jobs: int, run_timeout: float, deadline: float) -> tuple[list[Run], int]:
    start = time.monotonic()
    finished: list[Run] = []
    running: dict[int, tuple[subprocess.Popen, threading.Thread, float, Path]] = {}
    next_index = 0
    while next_index < runs or running:
        now = time.monotonic()
        # Start runs while there is a free slot and time left: the deadline bounds when a run may start.
        while next_index < runs and len(running) < jobs and now - start < deadline:
            run_dir = out / "runs" / str(next_index)
            run_dir.mkdir(parents=True, exist_ok=True)
            proc = subprocess.Popen(
                [sys.executable, str(script)],
                cwd=run_dir,
                env=run_env(run_dir),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            reader = threading.Thread(target=_copy, args=(proc.stdout, run_dir / "output.txt"), daemon=True)
            reader.start()
            running[next_index] = (proc, reader, now, run_dir)
            next_index += 1
        if next_index < runs and now - start >= deadline and not running:
            break  # out of time: the rest are not run
        for index, (proc, reader, began, run_dir) in list(running.items()):
            elapsed = time.monotonic() - began
            # A run has ended when rank 0 has exited and its output is closed: rank 1, rank 0's child, can abort
            # after rank 0 has exited 0, and the output it prints then is the only sign of it.
            ended = proc.poll() is not None and not reader.is_alive()
            # A run past its own timeout is stopped and counted as a hang. The deadline only stops new runs: one
            # cut short there would count as a hang it was not, so the soak ends at most run_timeout after it.
            timed_out = not ended and elapsed > run_timeout
            if not ended and not timed_out:
                continue
            if timed_out:
                stop(proc)
                proc.wait()
                reader.join(timeout=30)
            output = (run_dir / "output.txt").read_text(errors="replace")
            outcome = classify(proc.returncode, output, (run_dir / "done.txt").exists(), timed_out)
            result = Run(index, outcome, None if timed_out else proc.returncode, round(elapsed, 2))
            finished.append(result)
            del running[index]
            if outcome == "ok":
                shutil.rmtree(run_dir)  # keep only what needs reading
            print(f"run {index}: {outcome} (exit {result.returncode}, {elapsed:.1f} s)", flush=True)
        time.sleep(0.2)
    return sorted(finished, key=lambda r: r.index), runs - next_index


def versions() -> dict[str, str]:
    found = {}
    for name in ("torch", "lightning", "fairscale"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    # Each run is 2 busy processes: on 2 cores two at a time measured no more runs an hour than one at a time.
    parser.add_argument(
        "--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="runs at a time (default: cores / 2)"
    )
    parser.add_argument("--run-timeout", type=float, default=300.0, help="seconds before one run counts as a hang")
    parser.add_argument("--deadline", type=float, default=9000.0, help="seconds after which no run starts")
    parser.add_argument("--out", type=Path, default=Path("outputs/soak_exit_status"))
    parser.add_argument(
        "--script", type=Path, help="run this script instead of the converted corpus script (to check the soak itself)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.jobs < 1:
        parser.error("--runs and --jobs must be at least 1")

    args.out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    # The corpus script is converted once for all runs; a script given on the command line is run as it is.
    script = args.script.resolve() if args.script else convert(args.out)
    results, not_run = soak(script, args.out, args.runs, args.jobs, args.run_timeout, args.deadline)
    counts = {k: sum(r.outcome == k for r in results) for k in ("ok", "abort", "hang", "failed")}
    seconds = [r.seconds for r in results if r.outcome == "ok"]
    summary = {
        "date": started.isoformat(timespec="seconds"),
        "scenario": str(args.script)
        if args.script
        else f"{CORPUS_SCRIPT.relative_to(REPO_ROOT)} converted by lightning-mgpu upgrade --write, 2 CPU ranks",
        "runs_requested": args.runs,
        "runs": len(results),
        "not_run": not_run,
        "jobs": args.jobs,
        **counts,
        "exit_codes": {
            str(c): sum(r.returncode == c for r in results)
            for c in sorted({r.returncode for r in results}, key=lambda c: (c is None, c or 0))
        },
        "run_seconds_median": round(statistics.median(seconds), 2) if seconds else None,
        "run_seconds_max": max(seconds) if seconds else None,
        "wall_seconds": round(time.monotonic() - t0, 1),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), **versions()},
        "not_ok": [asdict(r) for r in results if r.outcome != "ok"],
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"{len(results)} of {args.runs} runs: {counts['ok']} ok, {counts['abort']} abort(s), {counts['hang']} hang(s),"
        f" {counts['failed']} other failure(s), {not_run} not run; median {summary['run_seconds_median']} s a run,"
        f" {summary['wall_seconds']} s in all -> {args.out / 'summary.json'}"
    )
    return 0 if counts["ok"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
