"""``examples/notebooks/``: each notebook executed top to bottom in a real Jupyter kernel (nbclient + ipykernel), as a
user runs it, and its outputs checked. A cell that raises fails the test (nbclient's default).

In a kernel ``sys.ps1`` is set, so Lightning sees an interactive session: its launchers that run the script again or
pickle the model refuse, and the forking ones run. The quick start's GPU case (``dp`` after a cell that initialised
CUDA) needs a GPU.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.launch import REPO_ROOT
from tests.helpers.runif import RunIf

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = REPO_ROOT / "examples" / "notebooks"
FORKING = ("ddp_notebook", "sharded_notebook", "sharded_zero_notebook", "sharded_fsdp2_notebook")


def _execute(name: str, cwd: Path) -> tuple[str, list[dict[str, Any]]]:
    """Run the notebook in a fresh kernel started in ``cwd``: its stdout, and its rich displays."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute()
    outputs = [o for cell in nb.cells for o in cell.get("outputs", [])]
    stdout = "".join(o["text"] for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")
    displays = [o["data"] for o in outputs if "data" in o]
    return stdout, displays


def _check_quickstart(stdout: str, displays: list[dict[str, Any]], cwd: Path, devices: int) -> None:
    trained = re.search(r"strategy=(\w+) devices=(\d+) steps=(\d+) val_acc=([\d.]+)", stdout)
    assert trained, stdout
    assert trained[1] == "DataParallelStrategy" and int(trained[2]) == devices
    assert int(trained[3]) > 0 and float(trained[4]) > 0.5, stdout
    # The dashboard's page, inline: the same page that was written beside the run.
    pages = [d["text/html"] for d in displays if "text/html" in d]
    assert len(pages) == 1 and pages[0].startswith("<iframe srcdoc="), [list(d) for d in displays]
    written = next(cwd.glob("notebook_logs/quickstart/version_0/dashboard/index.html"))
    assert "Plotly.react" in written.read_text() and "Plotly.react" in pages[0]
    # The monitor wrote its verdict and time line for the dashboard to read.
    assert any(cwd.glob("notebook_logs/quickstart/version_0/*diagnosis*.json")), sorted(cwd.rglob("*"))


@pytest.mark.timeout(300)
def test_quickstart_trains_with_dp_and_shows_its_dashboard_inline(tmp_path: Path) -> None:
    stdout, displays = _execute("quickstart", tmp_path)
    assert "no GPU: the cells below train on the CPU" in stdout or torch.cuda.is_available()
    _check_quickstart(stdout, displays, tmp_path, devices=max(torch.cuda.device_count(), 1))


@RunIf(min_cuda_gpus=1)
@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_quickstart_dp_runs_on_the_gpus_after_a_cell_initialised_cuda(tmp_path: Path) -> None:
    stdout, displays = _execute("quickstart", tmp_path)
    assert "CUDA initialised" in stdout, stdout
    _check_quickstart(stdout, displays, tmp_path, devices=torch.cuda.device_count())


@pytest.mark.timeout(400)
def test_the_forking_strategies_train_in_a_kernel_and_the_others_refuse_in_one_line(tmp_path: Path) -> None:
    stdout, _ = _execute("strategies_in_a_notebook", tmp_path)
    rows = {line.split()[0]: line for line in stdout.splitlines() if line.strip()}
    for strategy in (*FORKING, "dp"):
        row = rows.get(strategy, "")
        assert re.search(r" trains: val_acc 0\.[5-9]\d* in ", row), (strategy, stdout)
    expected = {
        "ddp_spawn": "choose a notebook-compatible strategy: `Trainer(strategy='ddp_notebook')`",
        "sharded_spawn": "use strategy='sharded_notebook'",
        "sharded_fsdp2": "use strategy='sharded_fsdp2_notebook'",
        "horovod": "in the notebook, use strategy='dp'",
    }
    for strategy, says in expected.items():
        row = rows.get(strategy, "")
        assert " refused: " in row and says in row, (strategy, stdout)
