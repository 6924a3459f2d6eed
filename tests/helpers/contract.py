"""The contract tier: Lightning's Trainer features under every strategy, judged from what the runs observed.

``tests/integration/runners/run_contract.py`` runs every feature of ``FEATURES`` under a group of strategies in one
launch and writes what each rank saw. This module launches the groups (once per test process), judges each
(strategy, feature) pair, and renders the feature x strategy table of ``docs/contract.md``:

    python -m tests.helpers.contract --write docs/contract.md              # the default tier's strategies
    python -m tests.helpers.contract --write docs/contract.md --extended   # and the *_spawn variants

A pair is ``ok``, ``refused: <the one-line message>`` (expected only where ``REFUSED`` says so), or ``failed: <why>``.
What each feature must do is what Lightning's own tests check of it (``tests/tests_pytorch/models/test_hooks.py``,
``trainer/logging_/``, ``trainer/optimization/``, ``callbacks/``, ``checkpointing/``), restated for these small fits.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.launch import run_python

RUNNER = "tests.integration.runners.run_contract"
CONTROL = "ddp"  # Lightning's own strategy: what every other one is compared with
#: One launch per group (a launch is mostly imports): the script-launched strategies in one process pair, the
#: one-process ones together, horovod self-launched from plain Python. The *_spawn variants start 2 workers per fit
#: (about 60 fits), so they are the extended tier's.
GROUPS: tuple[tuple[str, ...], ...] = (
    ("ddp", "sharded", "sharded_zero", "sharded_fsdp2"),
    ("dp", "dp_emulated", "ddp2"),
    ("horovod",),
)
EXTENDED_GROUPS: tuple[tuple[str, ...], ...] = (
    ("ddp_spawn", "sharded_spawn", "sharded_zero_spawn", "sharded_fsdp2_spawn"),
)
#: What each strategy needs installed (RunIf keywords).
NEEDS = {"sharded": "fairscale", "sharded_spawn": "fairscale", "horovod": "horovod"}
#: The table in the docs is rendered from the default tier's groups (CI runs them).
#: The columns' headings.
TITLES = {
    "ddp": "ddp (Lightning)",
    "ddp_spawn": "ddp_spawn (Lightning)",
    "dp": "dp",
    "dp_emulated": "dp, 2 devices*",
    "ddp2": "ddp2",
    "horovod": "horovod",
    "sharded": "sharded (FairScale)",
    "sharded_spawn": "sharded_spawn",
    "sharded_zero": "sharded_zero",
    "sharded_zero_spawn": "sharded_zero_spawn",
    "sharded_fsdp2": "sharded_fsdp2",
    "sharded_fsdp2_spawn": "sharded_fsdp2_spawn",
}
#: Feature -> (family, what is checked).
FEATURES: dict[str, tuple[str, str]] = {
    "hooks": ("hooks", "the hook sequence of fit, validate, test, predict and a resume with max_steps, as under ddp"),
    "log": ("logging", "self.log with sync_dist (mean, sum) and rank_zero_only; all_gather of a nested collection"),
    "clip_norm": ("optimization", "gradient clipping by norm, over the whole (sharded) gradient"),
    "clip_value": ("optimization", "gradient clipping by value"),
    "accumulate": ("optimization", "accumulate_grad_batches with max_steps"),
    "manual": ("optimization", "manual optimization with two optimizers"),
    "precision_64": ("optimization", "precision='64-true'"),
    "precision_bf16": ("optimization", "precision='bf16-mixed'"),
    "precision_bf16_true": ("optimization", "precision='bf16-true'"),
    "precision_16": ("optimization", "precision='16-mixed' (on a CPU Lightning runs it as bf16-mixed)"),
    "accumulate_scheduled": ("optimization", "GradientAccumulationScheduler (1, then 2 from epoch 1)"),
    "init_module": ("optimization", "a model built under trainer.init_module()"),
    "compile": ("optimization", "a torch.compile'd LightningModule"),
    "sampler": ("data", "a sampler the user attached, shared out over the ranks"),
    "predict": ("predict", "predict with two dataloaders and return_predictions"),
    "eval_log": (
        "logging",
        "validate and fit's validation with two dataloaders, and test: self.log with sync_dist in each",
    ),
    "checkpoint": ("callbacks", "ModelCheckpoint: save_top_k, every_n_train_steps, save_last"),
    "early_stopping": ("callbacks", "EarlyStopping stops every rank at the same epoch"),
    "swa": ("callbacks", "StochasticWeightAveraging"),
    "ema": ("callbacks", "EMA: WeightAveraging with an exponential moving average (Lightning 2.6)"),
    "lr_monitor": ("callbacks", "LearningRateMonitor(logging_interval='step') through the Trainer's logger"),
    "lr_finder": ("callbacks", "LearningRateFinder: the suggestion on every rank, the search's steps undone"),
    "batch_size_finder": ("callbacks", "BatchSizeFinder (Lightning refuses it under distributed strategies)"),
}
#: (strategy, feature) -> the start of the one-line refusal it must give, before any step.
_COMPILE = "RuntimeError: Using a compiled model is incompatible with the current strategy"
_SWA = "MisconfigurationException: StochasticWeightAveraging cannot average a model that"
_EMA = "MisconfigurationException: WeightAveraging cannot average a model that"
_BATCH_SIZE_FINDER = "MisconfigurationException: The Batch size finder is not supported with distributed strategies"
#: The strategies that run in one process (DataParallel's replicas are threads).
ONE_PROCESS = ("dp", "dp_emulated")
REFUSED = {
    # Lightning's SWA guard knows only its own FSDP and DeepSpeed; the bundle refuses for FSDP2 when fitting starts.
    ("sharded_fsdp2", "swa"): _SWA,
    ("sharded_fsdp2_spawn", "swa"): _SWA,
    ("sharded_fsdp2", "ema"): _EMA,
    ("sharded_fsdp2_spawn", "ema"): _EMA,
    # Lightning's own allow-list (SingleDeviceStrategy, DDPStrategy, FSDPStrategy): its one line names the strategy.
    ("dp", "compile"): _COMPILE,
    ("dp_emulated", "compile"): _COMPILE,
    ("horovod", "compile"): _COMPILE,
    # Lightning's own under its ddp_spawn as well: a spawned worker refuses return_predictions=True, and a compiled
    # module's forward does not pickle for the workers.
    **{(f"{s}_spawn", "predict"): "ProcessRaisedException: -- Process" for s in ("ddp", "sharded", "sharded_zero")},
    ("sharded_fsdp2_spawn", "predict"): "ProcessRaisedException: -- Process",
    **{
        (f"{s}_spawn", "compile"): "PicklingError: Can't pickle <function ContractModule.forward"
        for s in ("ddp", "sharded", "sharded_zero", "sharded_fsdp2")
    },
    # Lightning's own guard (BatchSizeFinder.setup), as under its ddp: every strategy of more than one process.
    **{
        (s, "batch_size_finder"): _BATCH_SIZE_FINDER
        for g in (*GROUPS, *EXTENDED_GROUPS)
        for s in g
        if s not in ONE_PROCESS
    },
    # ... which Lightning's ddp_spawn runs in its workers (the bundle's *_spawn launchers ask before spawning).
    ("ddp_spawn", "batch_size_finder"): "ProcessRaisedException: -- Process",
    # Horovod 0.28.1 has no bfloat16 collectives (the bundle refuses before the first broadcast).
    ("horovod", "precision_bf16_true"): "MisconfigurationException: strategy='horovod' with precision='bf16-true'",
}
#: (strategy, feature) -> (the start of the verdict, what the table says): a behaviour that differs from ddp's and is
#: documented instead of changed. The test holds the verdict to it, so a change in either direction is seen.
_LR_NOTE = (
    "LearningRateMonitor names its key after the optimizer the strategy holds, the sharding wrapper (`lr-{}` "
    "where ddp logs `lr-SGD`){}; name the scheduler "
    '(`{{"scheduler": ..., "name": "lr-SGD"}}`) to keep one key across strategies'
)
DIFFERS = {
    (strategy, "lr_monitor"): (
        f"failed: rank 0: logged is [{{'step': 0, 'lr-{wrapper}'",
        _LR_NOTE.format(wrapper, ", as Lightning 1.x's ddp_sharded did" if wrapper == "OSS" else ""),
    )
    for strategy, wrapper in (
        ("sharded", "OSS"),
        ("sharded_spawn", "OSS"),
        ("sharded_zero", "ZeroRedundancyOptimizer"),
        ("sharded_zero_spawn", "ZeroRedundancyOptimizer"),
    )
}
# The fits' sizes (run_contract.py): steps, test/predict batches; the learning rate before a search.
CLIP_NORM, CLIP_VALUE = 1e-3, 1e-4
LR = 0.01


@dataclass
class Runs:
    """The launched groups' outputs under ``root``; a group is launched the first time one of its strategies is
    asked for."""

    root: Path
    launched: set[tuple[str, ...]] = field(default_factory=set)

    def folder(self, strategy: str) -> Path:
        group = next((g for g in (*GROUPS, *EXTENDED_GROUPS) if strategy in g), None)
        if group is None:
            raise KeyError(f"{strategy!r} is in no contract group")
        if group not in self.launched:
            run_python(["-m", RUNNER, "--out", str(self.root), *group], timeout=900)
            self.launched.add(group)
        return self.root / strategy

    def seen(self, strategy: str, feature: str, stage: str) -> list[dict[str, Any]]:
        """What each rank wrote for ``feature``'s ``stage``, by rank."""
        files = sorted(self.folder(strategy).glob(f"{feature}.{stage}.rank*.json"), key=lambda p: int(p.stem[-1]))
        return [json.loads(p.read_text()) for p in files]

    def errors(self, strategy: str, feature: str) -> list[str]:
        return [json.loads(p.read_text())["error"] for p in self.folder(strategy).glob(f"{feature}.error.*.json")]

    def returned(self, strategy: str) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in self.folder(strategy).glob("predict.returned.*.json")]

    def verdict(self, strategy: str, feature: str) -> str:
        """``ok``, ``refused: MESSAGE`` or ``failed: WHY``."""
        errors = sorted(set(self.errors(strategy, feature)))
        if errors:
            documented = REFUSED.get((strategy, feature))
            if documented is not None and all(e.startswith(documented) for e in errors):
                return f"refused: {errors[0]}"
            if len(errors) == 1 and _is_one_line_refusal(errors[0]):
                return f"refused: {errors[0]}"
            return f"failed: {' | '.join(errors)}"
        problems = JUDGES[feature](self, strategy)
        return "ok" if not problems else "failed: " + "; ".join(problems)

    def check(self, strategy: str, feature: str) -> None:
        """Assert that ``feature`` works under ``strategy``, or is refused in the one line ``REFUSED`` names."""
        verdict = self.verdict(strategy, feature)
        refusal = REFUSED.get((strategy, feature))
        if (strategy, feature) in DIFFERS:
            documented = DIFFERS[strategy, feature][0]
            assert verdict.startswith(documented), f"{feature} under {strategy}: {verdict}, documented: {documented}"
        elif refusal is None:
            assert verdict == "ok", f"{feature} under {strategy}: {verdict}"
        else:
            assert verdict.startswith(f"refused: {refusal}"), f"{feature} under {strategy} must be refused: {verdict}"


def strategy_params() -> list[Any]:
    """The contract's strategies as pytest parameters: what each needs installed, and the *_spawn group in the
    extended tier."""
    import pytest

    from tests.helpers.runif import RunIf

    params = []
    for extended, groups in ((False, GROUPS), (True, EXTENDED_GROUPS)):
        for strategy in (s for g in groups for s in g):
            needs = NEEDS.get(strategy)
            marks = [*(RunIf(**{needs: True}).marks if needs else []), *([pytest.mark.extended] if extended else [])]
            params.append(pytest.param(strategy, marks=marks, id=strategy))
    return params


def features_of(family: str) -> list[str]:
    return [f for f, (fam, _) in FEATURES.items() if fam == family]


def _is_one_line_refusal(error: str) -> bool:
    return error.startswith(("MisconfigurationException:", "ValueError:", "RuntimeError:")) and "\n" not in error


def _world(runs: Runs, strategy: str, feature: str) -> int:
    return int(runs.seen(strategy, feature, "fit")[0]["world"])


def _ranks(seen: list[dict[str, Any]], world: int) -> list[str]:
    return [] if len(seen) == world else [f"{len(seen)} rank(s) reported, world size {world}"]


#: Strategies that run the *_step hooks once per device (DataParallel's replicas), where ddp runs them once per rank.
PER_DEVICE_STEPS = {"dp_emulated"}


def _once_per_batch(calls: list[str]) -> list[str]:
    """``calls`` with each run of a repeated ``*_step`` hook (one per DataParallel replica) kept once."""
    return [c for i, c in enumerate(calls) if not (c.endswith("_step") and i and calls[i - 1] == c)]


def _judge_hooks(runs: Runs, strategy: str) -> list[str]:
    problems = []
    for stage in ("fit", "validate", "test", "predict", "resume"):
        control = [s["calls"] for s in runs.seen(CONTROL, "hooks", stage)]
        seen = runs.seen(strategy, "hooks", stage)
        if not seen:
            problems.append(f"{stage}: no rank reported")
        for rank, got in enumerate(s["calls"] for s in seen):
            if strategy in PER_DEVICE_STEPS:
                got = _once_per_batch(got)
            expected = control[min(rank, len(control) - 1)]  # rank 1 runs no prepare_data (prepare_data_per_node)
            if got != expected:
                at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
                problems.append(
                    f"{stage}, rank {rank}: call {at} is {got[at : at + 3]} where ddp calls {expected[at : at + 3]}"
                )
    return problems


def _judge_log(runs: Runs, strategy: str) -> list[str]:
    seen = runs.seen(strategy, "log", "fit")
    world = int(seen[0]["world"])
    problems = _ranks(seen, world)
    batches = seen[0]["batches"]
    # Stacked along a new first dimension of size world; in one process without a process group (dp), unchanged.
    stacked = {
        "a": [[float(r)] for r in range(world)],
        "b": [[1.0 + r, 4.0 + r] for r in range(world)],
        "c": [1.0 + r for r in range(world)],
    }
    gathers = [stacked] if world > 1 else [stacked, {"a": [0.0], "b": [1.0, 4.0], "c": 1.0}]
    for rank, s in enumerate(seen):
        metrics = s["metrics"]
        if not math.isclose(metrics.get("synced", math.nan), (world + 1) / 2):
            problems.append(f"rank {rank}: sync_dist mean is {metrics.get('synced')}, not {(world + 1) / 2}")
        # Summed over steps and ranks; under DataParallel every device's training_step logs (all of them rank 0).
        loggers = 2 if strategy in PER_DEVICE_STEPS else world
        total = batches * (loggers if strategy in PER_DEVICE_STEPS else world * (world + 1) / 2)
        if not math.isclose(metrics.get("summed", math.nan), total):
            problems.append(f"rank {rank}: sync_dist sum is {metrics.get('summed')}")
        if rank == 0 and metrics.get("rank_zero_only") != 0.0:
            problems.append(f"rank 0: rank_zero_only value is {metrics.get('rank_zero_only')}")
        if s["gathered"] not in gathers:
            problems.append(f"rank {rank}: all_gather gave {s['gathered']}, not {gathers[0]}")
    return problems


def _judge_fit(check: Callable[[dict[str, Any]], str | None], feature: str) -> Callable[[Runs, str], list[str]]:
    def judge(runs: Runs, strategy: str) -> list[str]:
        seen = runs.seen(strategy, feature, "fit")
        if not seen:
            return ["no rank reported"]
        problems = _ranks(seen, int(seen[0]["world"]))
        problems += [f"rank {rank}: {why}" for rank, s in enumerate(seen) if (why := check(s))]
        return problems

    return judge


def _same_epoch_as_control(runs: Runs, strategy: str) -> list[str]:
    want = runs.seen(CONTROL, "early_stopping", "fit")[0]["current_epoch"]
    return _judge_fit(
        lambda s: None if s["current_epoch"] == want else f"stopped at epoch {s['current_epoch']}, ddp at {want}",
        "early_stopping",
    )(runs, strategy)


def _as_control(runs: Runs, strategy: str, feature: str, key: str, ranks: int | None = None) -> list[str]:
    """``key`` of what each rank (the first ``ranks``) saw equals what ddp's rank 0 saw."""
    want = runs.seen(CONTROL, feature, "fit")[0][key]
    seen = runs.seen(strategy, feature, "fit")[:ranks]
    if not seen:
        return ["no rank reported"]
    return [
        f"rank {rank}: {key} is {s.get(key)}, under ddp {want}" for rank, s in enumerate(seen) if s.get(key) != want
    ]


def _judge_sampler(runs: Runs, strategy: str) -> list[str]:
    """The user's sampler (the even indices) shared out: every index once, over all ranks, the same count each."""
    seen = runs.seen(strategy, "sampler", "fit")
    if not seen:
        return ["no rank reported"]
    got = [s.get("indices", []) for s in seen]
    flat = sorted(i for rank in got for i in rank)
    problems = [] if flat == list(range(0, 16, 2)) else [f"the ranks saw {got}, not the even indices once each"]
    if len({len(rank) for rank in got}) > 1:
        problems.append(f"unequal shares {got}")
    return problems


def _judge_predict(runs: Runs, strategy: str) -> list[str]:
    returned = runs.returned(strategy)
    if not returned:
        return ["the launching process got nothing back"]
    return [f"returned {r}" for r in returned if r.get("batches") != [2, 2]]


def _judge_lr_finder(runs: Runs, strategy: str) -> list[str]:
    """As Lightning's tests/tuner/test_lr_finder.py: the suggestion is set on the module and used by the optimizer,
    the same on every rank (rank 0's search, broadcast), and the fit then starts from the weights it had."""
    seen = runs.seen(strategy, "lr_finder", "fit")
    if not seen:
        return ["no rank reported"]
    problems = _ranks(seen, int(seen[0]["world"]))
    for rank, s in enumerate(seen):
        if not 1e-4 <= s["lr"] <= 1.0 or s["lr"] == LR:
            problems.append(f"rank {rank}: lr is {s['lr']}, not a suggestion in [1e-4, 1]")
        if s["optimizer_lr"] != s["lr"]:
            problems.append(f"rank {rank}: the optimizer has lr {s['optimizer_lr']}, the module {s['lr']}")
        if not s["restored"]:
            problems.append(f"rank {rank}: the fit started from the search's weights, not the model's own")
        if s["global_step"] != 2:
            problems.append(f"rank {rank}: {s['global_step']} steps after the search, not 2")
        if s["left_behind"]:
            problems.append(f"rank {rank}: the search's checkpoint is left behind: {s['left_behind']}")
    if len({s["lr"] for s in seen}) > 1:
        problems.append(f"the ranks' suggestions differ: {[s['lr'] for s in seen]}")
    return problems


def _judge_batch_size_finder(runs: Runs, strategy: str) -> list[str]:
    """Three trials of one step (2, 4, 8: each succeeds, so the size doubles), then the fit's 2 steps on batches of
    the size found, 8."""
    return _judge_fit(
        lambda s: (
            None
            if (s["batch_size"], s["global_step"], s["batch_sizes"], s["left_behind"]) == (8, 2, [2, 4, 8, 8, 8], [])
            else f"found {s['batch_size']}, then {s['global_step']} steps; batches {s['batch_sizes']}; left behind"
            f" {s['left_behind']}"
        ),
        "batch_size_finder",
    )(runs, strategy)


def _judge_checkpoint(runs: Runs, strategy: str) -> list[str]:
    files = runs.seen(strategy, "checkpoint", "fit")[0].get("files")
    want = ["epoch=0-step=3.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]
    return [] if files == want else [f"saved {files}, not {want}"]


def _judge_eval_log(runs: Runs, strategy: str) -> list[str]:
    """The mean over ranks of (rank + 1), and 10 more on the second validation loader, on every rank."""
    problems = []
    loaders = {"val_synced/dataloader_idx_0": 0.0, "val_synced/dataloader_idx_1": 10.0}
    for stage, want in (("validate", loaders), ("test", {"test_synced": 0.0}), ("fit", loaders)):
        seen = runs.seen(strategy, "eval_log", stage)
        if not seen:
            problems.append(f"{stage}: no rank reported")
        for rank, s in enumerate(seen):
            mean = (s["world"] + 1) / 2
            for key, offset in want.items():
                got = s["metrics"].get(key, math.nan)
                if not math.isclose(got, mean + offset):
                    problems.append(f"{stage}, rank {rank}: {key} is {got}, not {mean + offset}")
    return problems


JUDGES: dict[str, Callable[[Runs, str], list[str]]] = {
    "eval_log": _judge_eval_log,
    "hooks": _judge_hooks,
    "log": _judge_log,
    "clip_norm": _judge_fit(
        lambda s: (
            None
            if math.isclose(s["update_norm"], CLIP_NORM, rel_tol=1e-4)
            else f"SGD(lr=1)'s update has norm {s['update_norm']}, not the clip {CLIP_NORM}"
        ),
        "clip_norm",
    ),
    "clip_value": _judge_fit(
        lambda s: (
            None
            if math.isclose(s["update_max"], CLIP_VALUE, rel_tol=1e-4)
            else f"SGD(lr=1)'s largest update is {s['update_max']}, not the clip {CLIP_VALUE}"
        ),
        "clip_value",
    ),
    "accumulate": _judge_fit(
        lambda s: (
            None if (s["global_step"], s["batches"]) == (3, 6) else f"{s['global_step']} steps, {s['batches']} batches"
        ),
        "accumulate",
    ),
    "manual": _judge_fit(
        lambda s: (
            None if (s["global_step"], s["batches"]) == (4, 2) else f"{s['global_step']} steps, {s['batches']} batches"
        ),
        "manual",
    ),
    "precision_64": _judge_fit(
        lambda s: None if s["param_dtype"] == "torch.float64" else f"parameters are {s['param_dtype']}", "precision_64"
    ),
    "precision_bf16": _judge_fit(
        lambda s: None if s["output_dtype"] == "torch.bfloat16" else f"the forward ran in {s['output_dtype']}",
        "precision_bf16",
    ),
    "precision_bf16_true": _judge_fit(
        lambda s: None if s["param_dtype"] == "torch.bfloat16" else f"parameters are {s['param_dtype']}",
        "precision_bf16_true",
    ),
    "precision_16": lambda runs, strategy: _as_control(runs, strategy, "precision_16", "output_dtype"),
    "accumulate_scheduled": _judge_fit(
        lambda s: (
            None if (s["global_step"], s["batches"]) == (6, 8) else f"{s['global_step']} steps, {s['batches']} batches"
        ),
        "accumulate_scheduled",
    ),
    "init_module": _judge_fit(lambda s: None if s["global_step"] == 2 else f"{s['global_step']} steps", "init_module"),
    "compile": _judge_fit(lambda s: None if s["global_step"] == 2 else f"{s['global_step']} steps", "compile"),
    "sampler": lambda runs, strategy: _judge_sampler(runs, strategy),
    "lr_monitor": lambda runs, strategy: _as_control(runs, strategy, "lr_monitor", "logged", ranks=1),
    "predict": _judge_predict,
    "checkpoint": _judge_checkpoint,
    "early_stopping": _same_epoch_as_control,
    "swa": _judge_fit(lambda s: None if s["global_step"] == 4 else f"{s['global_step']} steps", "swa"),
    "ema": _judge_fit(lambda s: None if s["global_step"] == 4 else f"{s['global_step']} steps", "ema"),
    "lr_finder": _judge_lr_finder,
    "batch_size_finder": _judge_batch_size_finder,
}


def render_table(cells: dict[str, dict[str, str]]) -> str:
    """The markdown table: a row per feature, a column per strategy of ``cells`` (strategy -> feature -> verdict)."""
    strategies = list(cells)
    notes: list[str] = []
    lines = [
        "| feature | " + " | ".join(TITLES[s] for s in strategies) + " |",
        "|---|" + "---|" * len(strategies),
    ]
    for feature, (_, what) in FEATURES.items():
        row = []
        for strategy in strategies:
            verdict = cells[strategy][feature]
            if verdict == "ok":
                row.append("✓")
            elif (strategy, feature) in DIFFERS and verdict.startswith(DIFFERS[strategy, feature][0]):
                notes.append(f"{len(notes) + 1}. `{strategy}`, {feature}: {DIFFERS[strategy, feature][1]}.")
                row.append(f"differs ({len(notes)})")
            elif verdict.startswith("refused: "):
                notes.append(f"{len(notes) + 1}. `{strategy}`, {feature}: {verdict.removeprefix('refused: ')}")
                row.append(f"refused ({len(notes)})")
            else:
                notes.append(f"{len(notes) + 1}. `{strategy}`, {feature}: {verdict}")
                row.append(f"✗ ({len(notes)})")
        lines.append(f"| {what} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + ("\n" if notes else "")


def _main() -> None:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", type=Path, help="the markdown file whose table to replace")
    p.add_argument("--extended", action="store_true", help="the *_spawn variants as well")
    args = p.parse_args()
    runs = Runs(Path(tempfile.mkdtemp(prefix="contract-")))
    groups = (*GROUPS, *EXTENDED_GROUPS) if args.extended else GROUPS
    cells = {s: {f: runs.verdict(s, f) for f in FEATURES} for g in groups for s in g}
    table = render_table(cells)
    if args.write is None:
        print(table)  # noqa: T201  (a command-line tool of the tests)
        return
    text = args.write.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    args.write.write_text(text[:start] + "\n" + table + text[end:])


BEGIN, END = "<!-- contract table: begin -->", "<!-- contract table: end -->"

if __name__ == "__main__":
    _main()
