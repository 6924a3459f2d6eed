"""benchmarks.harness.cli: the options the benchmarks share, each with the benchmark's own default."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness.cli import config, parser


def test_only_the_named_options_exist_with_the_benchmarks_defaults_and_result_always() -> None:
    p = parser("doc", rounds=7, batch_size=64, threads=1)
    args = p.parse_args([])
    assert (args.rounds, args.batch_size, args.threads, args.result) == (7, 64, 1, None)
    assert not hasattr(args, "steps") and not hasattr(args, "accelerator")
    args = p.parse_args(["--rounds", "3", "--batch-size", "8", "--result", "r.json"])
    assert (args.rounds, args.batch_size, args.result) == (3, 8, Path("r.json"))
    with pytest.raises(SystemExit):
        p.parse_args(["--steps", "3"])  # not one of this benchmark's options


def test_shared_options_are_typed_and_checked() -> None:
    with pytest.raises(SystemExit):
        parser(None, accelerator="cpu").parse_args(["--accelerator", "tpu"])
    with pytest.raises(KeyError):
        parser(None, depth=3)  # not a shared option: the benchmark adds it itself


def test_config_reports_the_shared_options_a_run_has_or_the_names_asked_for() -> None:
    p = parser(None, accelerator="cpu", rounds=5, steps=10)
    p.add_argument("--layers", type=int, default=2)
    args = p.parse_args(["--steps", "4"])
    assert config(args) == {"accelerator": "cpu", "rounds": 5, "steps": 4}
    assert config(args, "layers", "rounds") == {"layers": 2, "rounds": 5}
