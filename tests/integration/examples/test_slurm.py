"""``examples/slurm.sbatch``: its srun line parses, and Lightning's SLURM environment gives each task its rank.

There is no SLURM here: each test sets the variables srun sets for one task and builds the Trainer the script
would, on CPU, in a fresh process (so nothing leaks into the test process).
"""

from __future__ import annotations

import json
import shlex

import pytest

from tests.helpers.launch import FAILS, REPO_ROOT, run_python

SBATCH = REPO_ROOT / "examples" / "slurm.sbatch"


def _srun_args() -> list[str]:
    line = next(line for line in SBATCH.read_text().splitlines() if line.startswith("srun "))
    args = shlex.split(line)
    assert args[:3] == ["srun", "python", "examples/train.py"]
    return args[3:]


def _task_env(procid: int, nodes: int = 2, per_node: int = 4) -> dict[str, str]:
    """What srun exports to task ``procid`` of ``nodes`` x ``per_node`` tasks."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "lightning-mgpu",
        "SLURM_NTASKS": str(nodes * per_node),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid % per_node),
        "SLURM_NODEID": str(procid // per_node),
        "SLURM_NODELIST": "gpu-node[07-08]",
        "MASTER_PORT": "29500",
    }


PROBE = """
import json, sys
sys.argv = ["train.py", *json.loads(sys.argv[1])]
sys.path.insert(0, "examples")
import train
# The sbatch's line asks for the GPU nodes it was written for: their 4 GPUs each, as the parser sees them there.
train._cuda_available, train._cuda_count = (lambda: True), (lambda: 4)
args = train.parse_args(sys.argv[1:])
import lightning.pytorch as pl
t = pl.Trainer(strategy=args.strategy, accelerator="cpu", devices=args.devices, num_nodes=args.num_nodes, logger=False)
train.check_world_size(t, args)  # what train.py does right after building its Trainer
env = t.strategy.cluster_environment
print(json.dumps({"env": type(env).__name__, "rank": t.global_rank, "local": t.local_rank, "node": t.node_rank,
                  "world": t.world_size, "addr": env.main_address, "port": env.main_port}))
"""


# sharded reads SLURM's variables through the same cluster environment as ddp: the extended tier's.
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("sharded", marks=pytest.mark.extended)])
@pytest.mark.parametrize("procid", [0, 5])
def test_each_srun_task_gets_its_rank_from_slurm(procid: int, strategy: str) -> None:
    args = _srun_args()  # parsed as written; the probe then builds the Trainer on this CPU machine
    args[args.index("--strategy") + 1] = strategy
    out = (
        run_python(["-c", PROBE, json.dumps(args)], timeout=120, env=_task_env(procid)).stdout.strip().splitlines()[-1]
    )
    got = json.loads(out)
    assert got == {
        "env": "SLURMEnvironment",
        "rank": procid,
        "local": procid % 4,
        "node": procid // 4,
        "world": 8,
        "addr": "gpu-node07",
        "port": 29500,
    }


def test_devices_that_disagree_with_the_tasks_per_node_are_refused() -> None:
    args = _srun_args()
    args[args.index("--devices") + 1] = "2"  # srun starts 4 tasks per node
    proc = run_python(["-c", PROBE, json.dumps(args)], timeout=120, env=_task_env(1), expect=FAILS)
    assert "the launcher started 8 training processes, but --devices 2 x --num-nodes 2 = 4" in proc.stderr, proc.stderr[
        -2000:
    ]
    assert "--ntasks-per-node" in proc.stderr
