"""``lightning-mgpu`` (``python -m lightning_mgpu``): info, --help, bad command lines.

The tests that launch processes; the in-process ones are in ``tests/unit/test_cli.py``.
"""

from __future__ import annotations

import pytest

from lightning_mgpu.strategies import BUNDLE_STRATEGY_NAMES
from tests.helpers.launch import REPO_ROOT, run_python


def test_info_command_names_every_strategy_and_version() -> None:
    out = run_python(["-m", "lightning_mgpu", "info"], timeout=120).stdout
    for name in ("ddp", "ddp_spawn", *BUNDLE_STRATEGY_NAMES):
        assert f"\n  {name} " in out, name
    for pkg in ("torch", "lightning", "pytorch-lightning", "fairscale", "horovod", "ray", "neptune", "libcst"):
        assert f"\n  {pkg} " in out, pkg
    assert "NOT REGISTERED" not in out
    assert "horovod build" in out and "Devices:" in out and "CUDA_VISIBLE_DEVICES" in out
    assert "horovodrun -np" in out and "--strategy sharded" in out


def test_subcommands_are_listed() -> None:
    out = run_python(["-m", "lightning_mgpu", "--help"], timeout=120).stdout
    assert "info" in out and "dashboard" in out and "build-horovod" in out


#: A command that prints which of the heavy packages a CLI call imported, after running it.
_WATCH = (
    "import sys\n"
    "from lightning_mgpu.cli import main\n"
    "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as err:\n    code = err.code\n"
    "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'pytorch_lightning', 'numpy'})\n"
    "sys.stderr.write(f'HEAVY={heavy} CODE={code}\\n')\n"
)


def _watched(argv: list[str]) -> tuple[str, list[str], int]:
    # The watcher catches the CLI's SystemExit and reports its code: the process itself exits 0.
    proc = run_python(["-c", _WATCH, *argv], timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    heavy = eval(last.split("HEAVY=", 1)[1].split(" CODE=")[0])  # noqa: S307  (our own print of a list of names)
    return proc.stdout + proc.stderr, heavy, int(last.rsplit("CODE=", 1)[1])


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        [],
        ["info", "--help"],
        ["dashboard", "--help"],
        ["upgrade", "--help"],
        ["convert", "--help"],
        ["build-horovod", "--help"],
        ["upgrade", "--explain", "epoch-end"],
        ["upgrade", str(REPO_ROOT / "tests" / "helpers" / "upgrade_corpus" / "gan_dp.py")],
    ],
    ids=lambda argv: " ".join(argv[:2]) or "(none)",
)
def test_help_and_upgrade_import_neither_torch_nor_lightning(argv: list[str]) -> None:
    out, heavy, code = _watched(argv)
    assert code == 0, out
    assert heavy == [], f"{argv} imported {heavy}"
    assert "lightning-mgpu" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["bogus"], "lightning-mgpu: error: argument COMMAND: invalid choice: 'bogus'"),
        (["info", "--nope"], "lightning-mgpu info: error: unrecognized arguments: --nope"),
        (["dashboard"], "lightning-mgpu dashboard: error: the following arguments are required: run"),
        (["dashboard", "x", "--port", "many"], "lightning-mgpu dashboard: error: argument --port: invalid int value"),
        (["convert", "a"], "lightning-mgpu convert: error: the following arguments are required: out"),
        (["convert", "a", "b", "--to", "zip"], "lightning-mgpu convert: error: argument --to: invalid choice: 'zip'"),
        (["upgrade"], "lightning-mgpu upgrade: error: name .py or .ipynb files or folders"),
        (["upgrade", "--explain", "nope"], "lightning-mgpu upgrade: error: no rule 'nope'"),
        (["upgrade", "/nonexistent/x.py"], "lightning-mgpu upgrade: error: /nonexistent/x.py does not exist"),
        (
            ["build-horovod", "--python"],
            "lightning-mgpu build-horovod: error: argument --python: expected one argument",
        ),
    ],
)
def test_every_bad_command_line_is_one_line_and_exit_2(argv: list[str], says: str) -> None:
    out, heavy, code = _watched(argv)
    lines = [line for line in out.strip().splitlines() if not line.startswith("HEAVY=")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(says), out
    assert "Traceback" not in out and heavy == []


@pytest.mark.skipif(__import__("torch").version.cuda is not None, reason="a CUDA torch can build --gpu")
def test_build_horovod_gpu_on_a_cpu_torch_is_refused_before_any_work() -> None:
    out, heavy, code = _watched(["build-horovod", "--gpu"])
    lines = [line for line in out.strip().splitlines() if not line.startswith("HEAVY=")]
    assert code == 2 and len(lines) == 1, out
    assert lines[0].startswith("lightning-mgpu build-horovod: error: build-horovod --gpu needs a CUDA build of torch")
