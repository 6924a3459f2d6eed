"""``benchmarks/bench_upgrade_real.py``: what it counts as a notebook's Python."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("libcst", reason="lightning-mgpu upgrade needs the [upgrade] extra (libcst)")

from benchmarks.bench_upgrade_real import notebook_code


def test_a_notebooks_code_is_its_python_cells_and_the_python_files_they_write() -> None:
    cells = [
        "import os\n%matplotlib inline\n!ls",
        "%%writefile config.yaml\ntrainer:\n  gpus: 1",
        "%%bash\necho hi",
        "%%writefile model.py\nclass M:\n    pass",
        "%%time\nx = 1",
    ]
    notebook = {
        "cells": [{"cell_type": "code", "source": c} for c in cells] + [{"cell_type": "markdown", "source": "#"}]
    }
    code = notebook_code(json.dumps(notebook))
    assert code == "import os\n\nclass M:\n    pass\n\nx = 1\n"
    compile(code, "<cells>", "exec")
