"""``pytorch_lightning`` and ``lightning.pytorch`` in one environment, in fresh processes.

- every import order, and either distribution alone (the other's import blocked), registers the bundle's names where
  the user's Trainer looks them up;
- for each strategy, a two-process fit under ``pytorch_lightning`` ends with parameters bitwise equal to the same fit
  under ``lightning.pytorch``.

The in-process tests are in ``tests/unit/utilities/test_namespaces.py``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from lightning_mgpu.utilities._compat import fsdp2_runs_on_cpu
from tests.helpers.launch import join_runs, parity_params, run_python
from tests.helpers.runif import RunIf, require_or_skip
from tests.helpers.shared_gpu import launch_nodes, node_args

require_or_skip("pytorch_lightning")

# Each script prints one line the test reads: the module of the class that pl.Trainer(strategy="dp") built.
_ORDERS = {
    "bundle first": "import lightning_mgpu\nimport pytorch_lightning as pl\n",
    "pytorch_lightning first": "import pytorch_lightning as pl\nimport lightning_mgpu\n",
    # A user with pytorch_lightning alone: the bundle's top-level names are then the twin's.
    "pytorch_lightning alone": "import sys\nsys.modules['lightning'] = None\nimport pytorch_lightning as pl\nimport"
    " lightning_mgpu\nassert lightning_mgpu.DataParallelStrategy.__module__.startswith('lightning_mgpu.pl.')\n",
}
_CHECK = """
import warnings
warnings.simplefilter("error", RuntimeWarning)  # a twin that failed to load warns: fail on it
trainer = pl.Trainer(strategy="dp", accelerator="cpu", logger=False, enable_progress_bar=False)
assert all(name in pl.strategies.StrategyRegistry for name in ("dp", "ddp2", "horovod", "ddp_sharded", "sharded_fsdp2"))
print("STRATEGY", type(trainer.strategy).__module__)
"""
_LIGHTNING_ALONE = """
import sys
sys.modules["pytorch_lightning"] = None
import lightning_mgpu, lightning.pytorch as lp
assert "lightning_mgpu.pl" not in sys.modules
print("STRATEGY", type(lp.Trainer(strategy="dp", accelerator="cpu", logger=False).strategy).__module__)
"""


def _strategy_module(script: str) -> str:
    out = run_python(["-c", textwrap.dedent(script)], timeout=120).stdout
    (line,) = [line for line in out.splitlines() if line.startswith("STRATEGY ")]
    return line.split()[1]


@pytest.mark.parametrize("order", list(_ORDERS))
def test_every_import_order_registers_the_names_for_pytorch_lightning(order: str) -> None:
    assert _strategy_module(_ORDERS[order] + _CHECK) == "lightning_mgpu.pl.strategies.dp.strategy"


def test_lightning_alone_needs_no_twin() -> None:
    assert _strategy_module(_LIGHTNING_ALONE) == "lightning_mgpu.strategies.dp.strategy"


def test_without_either_lightning_the_import_names_both_extras() -> None:
    script = "import sys\nsys.modules['lightning'] = sys.modules['pytorch_lightning'] = None\nimport lightning_mgpu\n"
    proc = run_python(["-c", script], timeout=60, expect=1)
    assert "ImportError" in proc.stderr
    assert "lightning_mgpu[lightning]" in proc.stderr and "lightning_mgpu[pytorch-lightning]" in proc.stderr
    assert "pip install -e '.[lightning]'" in proc.stderr  # the line that works from a clone today


#: The runs of one launch, under each namespace. Both namespaces' runs share the launch (a launch is mostly imports):
#: the popen strategies' rank 1 walks the same runs; a process that imported both trees is one more a user can have.
#: FSDP2 runs on the CPU from torch 2.7 (utilities/_compat.py FSDP2_ON_CPU_SINCE; scripts/check_oldest.sh runs torch
#: 2.6, where the strategy refuses the CPU by name: tests/unit/utilities/test_compat.py).
_FSDP2_ON_CPU = fsdp2_runs_on_cpu()
_LAUNCHES: dict[str, list[list[str]]] = {
    "ddp family": [
        ["--strategy", "ddp"],
        ["--strategy", "sharded", "--sharded-backend", "fairscale"],
        ["--strategy", "sharded", "--sharded-backend", "torch"],
        *([["--strategy", "sharded_fsdp2", "--sharded-backend", "fsdp2"]] if _FSDP2_ON_CPU else []),
    ],
    "ddp_spawn": [["--strategy", "ddp_spawn"]],
    "dp": [["--strategy", "dp_emulated"]],  # the multi-replica DataParallel path, on CPU threads
    "horovod": [["--strategy", "horovod"]],
}
_NAMESPACES = ("pytorch_lightning", "lightning.pytorch")


def _fit(root: Path, launch: str) -> dict[str, list[Path]]:
    """Each of ``launch``'s runs under either namespace, pytorch_lightning's first; the outputs by namespace."""
    outs: dict[str, list[Path]] = {namespace: [] for namespace in _NAMESPACES}
    runs = []
    for namespace in _NAMESPACES:
        for flags in _LAUNCHES[launch]:
            out = root / namespace / "-".join(flags[1::2])
            outs[namespace].append(out)
            runs.append(
                [
                    "--out",
                    str(out),
                    "--devices",
                    "2",
                    "--steps",
                    "4",
                    "--optimizer",
                    "adam",
                    "--lr",
                    "0.01",
                    "--namespace",
                    namespace,
                    *flags,
                ]
            )
    run_python(["-m", "tests.integration.runners.run_parity", *join_runs(runs)], timeout=300)
    return outs


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "launch",
    [
        pytest.param(
            name,
            marks=[
                *(RunIf(horovod=True).marks if name == "horovod" else RunIf(fairscale=True).marks),
                # Lightning's own spawn launcher under either namespace (the bundle's part is the same as under ddp),
                # and horovod, whose pytorch_lightning twin the converted 1.x horovod script trains under in the
                # default tier (tests/integration/upgrade/test_corpus.py, horovod_processes.py).
                *([pytest.mark.extended] if name in ("ddp_spawn", "horovod") else []),
            ],
        )
        for name in _LAUNCHES
    ],
)
def test_a_two_process_fit_under_pytorch_lightning_equals_lightning_pytorch(launch: str, tmp_path: Path) -> None:
    outs = _fit(tmp_path, launch)
    for a, b in zip(outs["pytorch_lightning"], outs["lightning.pytorch"]):
        ran = json.loads((a / "result.json").read_text())
        # The run really was pytorch_lightning's Trainer with a pytorch_lightning strategy (the bundle's twin, or its
        # own).
        assert ran["trainer"].startswith("pytorch_lightning.") and ran["strategy"].startswith(
            ("pytorch_lightning.", "lightning_mgpu.pl.")
        ), ran
        assert json.loads((b / "result.json").read_text())["trainer"].startswith("lightning.pytorch.")
        pa, pb = parity_params(a), parity_params(b)
        assert pa and sorted(pa) == sorted(pb), a.name
        for rank in pa:
            assert pa[rank].keys() == pb[rank].keys()
            assert all(torch.equal(pa[rank][k], pb[rank][k]) for k in pa[rank]), f"{a.name} rank {rank}"


# ddp2's two nodes: the extended tier's. The bundle's names under pytorch_lightning are the ddp family's and dp's
# (above); ddp2 itself trains in tests/integration/strategies/ddp2.
@pytest.mark.extended
def test_ddp2_on_two_nodes_under_pytorch_lightning_equals_lightning_pytorch(tmp_path: Path) -> None:
    """ddp2: one process per node (two nodes here), DataParallel over two CPU-thread devices within each."""
    runs = []
    for namespace in _NAMESPACES:  # both in one launch of the two nodes, as above
        run = [
            "--out",
            str(tmp_path / namespace),
            "--strategy",
            "ddp2_emulated",
            "--steps",
            "4",
            "--namespace",
            namespace,
            *node_args(2, "cpu"),
        ]
        run[run.index("--devices") + 1] = "2"  # two emulated devices per node
        runs.append(run)
    launch_nodes(
        ["-m", "tests.integration.runners.run_parity", *join_runs(runs)], 2, timeout=240, env={"OMP_NUM_THREADS": "1"}
    )
    params = {namespace: parity_params(tmp_path / namespace) for namespace in _NAMESPACES}
    for namespace in _NAMESPACES:  # each run was its namespace's Trainer
        assert json.loads((tmp_path / namespace / "result.json").read_text())["trainer"].startswith(f"{namespace}.")
    assert sorted(params["pytorch_lightning"]) == [0, 1]
    for rank, state in params["pytorch_lightning"].items():
        assert all(torch.equal(state[k], params["lightning.pytorch"][rank][k]) for k in state), rank
